"""Entry point only: flags -> params (trainer/settings/, trainer/chain.py) -> the chosen engine.

    .venv/bin/python -m trainer.task --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT [--use_tpu --tpu NAME \\
        --tpu_zone Z --gcp_project P] [--config hparams.yaml] [--train_steps 1500 ...]
    .venv/bin/python -m trainer.task --engine keras ...   # TPUStrategy + a Keras model (trainer/keras/)
    .venv/bin/python -m trainer.task --help      # every setting, its default and allowed values

Every setting of trainer/settings/table.py is a flag of the same name. Flags default
to "unset" and override only what the user typed. --job-dir (passed by AI Platform)
is another name for --output_dir, --format for --predict_format. A mistake the user
can fix (common/user_errors.py) is one line and exit code 2, before anything is written.
Ctrl-C (exit 130) and SIGTERM (a preempted machine; exit 143) are one line naming the step
the same command resumes from.
"""
import functools
import importlib.util
import os
import sys

from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once

from common.user_errors import UserError  # noqa: E402
from trainer.cloud import hptuning, libtpu_pair, tf_config  # noqa: E402  (no TensorFlow)
from trainer.settings import early_check, flags, table  # noqa: E402  (no TensorFlow: --help and typos answer at once)


STOPPED_BEFORE_THE_RUN = "stopped before the run began; nothing was written: run the same command again"


def main(argv=None):
    """The steps in sequence: flags, the params chain, the engine, then the run (its checks,
    lock and mode: trainer/run/driver.py) and the closing summary. Ctrl-C or SIGTERM at any
    point, TensorFlow's import included, is one line (the run's own line once it has begun)."""
    stopped = [lambda: STOPPED_BEFORE_THE_RUN]  # what a stop leaves; the run's own once it begins
    with console.exit_on_interrupt(lambda: stopped[0]()):
        return run_command(argv, stopped)


def run_command(argv, stopped):
    console.configure_logging(VERBOSITY)
    typed, config_file = flags.parse_flags(sys.argv[1:] if argv is None else argv)
    # A value the settings' rules refuse on their own answers before TensorFlow loads.
    console.exit_on_user_error(early_check.check_before_tensorflow, typed, config_file,
                               hptuning.trial_output_dir(typed.get("output_dir")), check_engine)
    # A TPU build of TensorFlow beside a libtpu it cannot run with aborts the process as it
    # loads: say so first, in one line.
    console.exit_on_user_error(libtpu_pair.check_installed_pair)
    # TensorFlow loads only now that the flags have parsed.
    from trainer.run import checkpoints, failures
    from trainer.report import summary
    from trainer import chain
    try:
        params = chain.resolve(typed, config_file)
        # What Ctrl-C (exit 130) or SIGTERM (exit 143) leaves: the step the same command resumes from.
        stopped[0] = functools.partial(checkpoints.describe_interrupted, params["output_dir"],
                                       table.mode_reads(params).trains, params["mode"])
        run = load_engine(params["engine"])
        try:
            result = run(params)
        except Exception as err:  # noqa: BLE001 (re-raised unless failures names it)
            explained = failures.explain(err, params)  # a library error a user can fix (a full disk)
            if explained is None:
                raise
            raise explained from None
    except UserError as err:  # a bad setting, a busy output_dir, data unlike its metadata
        console.exit_with_error(err)
    print(summary.summarize_run(params, result), flush=True)
    return result


ESTIMATOR_MISSING = ("--engine estimator needs tensorflow-estimator (TensorFlow <= 2.15), not installed "
                     "here: use --engine keras or the .venv environment")


JAX_MISSING = ("--engine jax needs JAX and Keras 3 with KERAS_BACKEND=jax, not here: use the .venv-jax "
               "environment (make venv-jax)")


def is_jax_installed():
    """True where Keras 3 runs on JAX: .venv-jax (its .pth file sets KERAS_BACKEND=jax)."""
    return (importlib.util.find_spec("jax") is not None and importlib.util.find_spec("keras") is not None
            and os.environ.get("KERAS_BACKEND") == "jax")


def is_estimator_installed():
    return importlib.util.find_spec("tensorflow_estimator") is not None


def check_engine(name):
    """UserError where engine `name` cannot run here: its packages are not installed, or (Keras)
    TF_CONFIG describes a cluster of several trainers. Judged without TensorFlow, so the early
    check asks it too (before TensorFlow loads, where it sees the engine), and load_engine asks
    it again for every run."""
    if name == "keras":
        tf_config.check_cluster()  # the Keras engine is one client
    if name == "jax" and not is_jax_installed():
        raise UserError(JAX_MISSING)
    if name == "estimator" and not is_estimator_installed():
        raise UserError(ESTIMATOR_MISSING)


def load_engine(name):
    """The run function of engine `name` (check_engine's refusals first), imported only when
    chosen: the Keras engine's imports never reach tf.estimator, which TensorFlow 2.16 and
    later do not have (.venv-keras)."""
    check_engine(name)
    if name == "keras":
        from trainer.keras import engine
        return engine.run
    if name == "jax":
        from trainer.jax import engine as jax_engine
        return jax_engine.run
    from trainer.estimator import cluster
    return cluster.run  # the engine's run, or a cluster role of TF_CONFIG


if __name__ == "__main__":
    main()
