"""Beam runner, options and logging shared by both pipelines (preprocessing, batch prediction).

Locally: Beam's FnApiRunner in this process, fully offline (Beam 2.72's plain
DirectRunner first tries to download and start a Prism binary). Remote runners
get this project's setup.py, so their workers can import it.

    .venv/bin/python -c "from common import beam_pipeline as b; print(b.build_pipeline_options([]).get_all_options()['runner'])"
"""
import logging
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions, GoogleCloudOptions, PipelineOptions, PortableOptions, SetupOptions,
    StandardOptions, TestOptions, WorkerOptions, _BeamArgumentParser)
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle

from common import console
from common.user_errors import UserError

# The local default: FnApiRunner, in this process, with one worker (in_memory): the fastest
# local mode bench/bench_preprocess.py measured (docs/benchmarks.md, "Measured figures behind
# choices in the code": threads contend for the GIL, processes each import Beam first).
LOCAL_RUNNER = "FnApiRunner"
LOCAL_RUNNING_MODE = "in_memory"
# Runners that submit to Google Cloud with the user's Application Default Credentials.
GOOGLE_CLOUD_RUNNERS = ("DataflowRunner",)
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner",
                 "BundleBasedDirectRunner", "PrismRunner", "TestDirectRunner")
# Shipped to remote workers so that they can import common/ and the stage packages.
PROJECT_SETUP_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "setup.py")
# Local worker processes log only warnings, plus the INFO lines of the loggers a
# pipeline names (progress, files written); Beam's per-worker start-up chatter is hidden.
LOCAL_WORKER_LOG_LEVEL = "WARNING"
_LOGGER = logging.getLogger(__name__)


class PipelineFlagError(UserError):
    """An argument that is neither the command's nor a Beam pipeline option, or a Google Cloud
    runner without credentials: one line naming it (and the closest flag)."""


def check_pipeline_args(parser, pipeline_args):
    """PipelineFlagError unless every argument a Beam entry point's parser left over
    (parser.parse_known_args) is a Beam pipeline option (check_pipeline_flags).

    The entry point parses its own flags first, so that --help and its own mistakes answer
    before Beam loads (this module imports it); the command's flags are read from parser's
    help (console.flag_names), not from argparse's private tables.
    """
    try:
        check_pipeline_flags(console.strip_verbosity_flags(pipeline_args),
                             console.flag_names(parser))
    except ValueError as err:  # an unknown flag, a stray path, no credentials for the runner
        raise PipelineFlagError(str(err)) from None


def check_pipeline_flags(pipeline_args, command_flags):
    """ValueError for an argument that is neither the command's nor a Beam pipeline option,
    and MissingCredentials for a Google Cloud runner without credentials (check_credentials).

    Beam's PipelineOptions ignores unknown flags, so a typo (--eval_fracton) would run
    with the default silently; a stray path is a glob the shell expanded. Both entry
    points call this right after parsing, before anything reads gs://.
    """
    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access (Beam's own way)
    _, unknown = parser.parse_known_args(pipeline_args)
    for arg in unknown:
        if arg.startswith("-"):
            known = list(command_flags) + console.flag_names(parser)
            raise ValueError(console.unknown_flag_error(arg, known))
        raise ValueError(console.unexpected_argument_error(arg))
    check_credentials(pipeline_args)


class MissingCredentials(ValueError):
    """A Google Cloud runner was asked for, and this machine has no credentials for it."""


def check_credentials(pipeline_args, find_credentials=None):
    """MissingCredentials, at once, when --runner DataflowRunner finds no Application Default
    Credentials.

    Without this, Beam retries every GCS and Dataflow request without credentials for
    2-3.5 minutes and then fails with a traceback. --no_auth (anonymous access) and
    Beam's --dry_run (the job is built, not submitted) skip the check.
    find_credentials: google.auth.default unless a test passes another.
    """
    options = PipelineOptions(pipeline_args)
    if runner_name(options) not in GOOGLE_CLOUD_RUNNERS:
        return
    if options.view_as(GoogleCloudOptions).no_auth or options.view_as(TestOptions).dry_run:
        return
    import google.auth  # a Beam [gcp] dependency; only Google Cloud runners need it
    from google.auth import exceptions
    try:
        (find_credentials or google.auth.default)()
    except exceptions.DefaultCredentialsError:
        raise MissingCredentials(
            f"--runner {runner_name(options)} needs Google Cloud credentials and this machine has "
            f"none: run 'gcloud auth application-default login' (or set "
            f"GOOGLE_APPLICATION_CREDENTIALS to a service-account key file)") from None


def runner_name(options):
    """'FnApiRunner', 'DataflowRunner', ...: the class name of --runner, without its module."""
    return (options.view_as(StandardOptions).runner or LOCAL_RUNNER).rsplit(".", 1)[-1]


def build_pipeline_options(pipeline_args, info_loggers=()):
    """Beam options with this project's defaults for what the user did not type.

    info_loggers: logger names whose INFO lines local worker processes still print.
    """
    options = PipelineOptions(pipeline_args)
    standard = options.view_as(StandardOptions)
    typed = {arg.split("=")[0] for arg in pipeline_args if arg.startswith("--")}
    if not standard.runner:
        standard.runner = LOCAL_RUNNER
    runner = runner_name(options)
    if runner == LOCAL_RUNNER:
        set_local_running_mode(options.view_as(DirectOptions), typed)
        set_local_worker_logging(options, typed, info_loggers)
    elif runner == "DirectRunner":
        _LOGGER.warning("--runner DirectRunner first tries Beam's Prism runner, which "
                        "downloads a binary; for an offline run use --runner %s", LOCAL_RUNNER)
    if runner not in LOCAL_RUNNERS and not is_loopback(options):
        setup = options.view_as(SetupOptions)
        if not setup.setup_file and os.path.exists(PROJECT_SETUP_FILE):
            setup.setup_file = PROJECT_SETUP_FILE
    return options


def has_one_worker(options):
    """The local runner with one worker (the default here): no other worker to spread work to."""
    return (runner_name(options) == LOCAL_RUNNER
            and options.view_as(DirectOptions).direct_num_workers == 1)


def is_loopback(options):
    """--environment_type LOOPBACK: the portable runner's workers are this process, which
    imports the checkout already; staging setup.py would only build an sdist nobody installs."""
    return (options.view_as(PortableOptions).environment_type or "").upper() == "LOOPBACK"


def set_local_running_mode(direct, typed):
    if "--direct_running_mode" not in typed:
        # Several workers asked for: threads of this process; else the default.
        several = "--direct_num_workers" in typed and direct.direct_num_workers != 1
        direct.direct_running_mode = "multi_threading" if several else LOCAL_RUNNING_MODE
    if "--direct_num_workers" not in typed:
        # in_memory runs one worker; a chosen threads or processes mode gets one per core.
        direct.direct_num_workers = 1 if direct.direct_running_mode == "in_memory" else 0


def set_local_worker_logging(options, typed, info_loggers):
    worker = options.view_as(WorkerOptions)
    if "--default_sdk_harness_log_level" not in typed:
        worker.default_sdk_harness_log_level = LOCAL_WORKER_LOG_LEVEL
    if "--sdk_harness_log_level_overrides" not in typed:
        worker.sdk_harness_log_level_overrides = {name: "INFO" for name in info_loggers}


def make_runner(options):
    """The FnApiRunner built as Beam's DirectRunner builds it, minus the Prism attempt.

    Built here (not from --runner FnApiRunner) so that the worker processes
    receive the pipeline options, e.g. their log level. Other runners: None, and
    beam.Pipeline creates them from --runner.
    """
    if runner_name(options) != LOCAL_RUNNER:
        return None
    all_options = options.get_all_options()
    provision_info = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(
        pipeline_options=JobServiceHandle.encode_pipeline_options(all_options)))
    return fn_runner.FnApiRunner(provision_info=provision_info)


def run_to_completion(build, options):
    """Builds a pipeline with build(pipeline), runs it and waits; returns the PipelineResult.

    RuntimeError when the job ends in any state but DONE.
    """
    pipeline = beam.Pipeline(runner=make_runner(options), options=options)
    build(pipeline)
    result = pipeline.run()
    state = result.wait_until_finish()
    if state != beam.runners.runner.PipelineState.DONE:
        raise RuntimeError(f"pipeline ended in state {state}")
    return result


def configure_logging():
    """INFO from this project, warnings from Beam; forwarded worker logs are not repeated
    (local workers print to this process's stderr themselves).

    The environment variables are inherited by the local worker processes:
    without them each worker prints TensorFlow's CUDA probing and Google's
    Python-version notices.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    verbosity = console.configure_logging()
    logging.getLogger("apache_beam").setLevel(logging.WARNING if verbosity else logging.ERROR)
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(
        logging.ERROR)
