"""The main() of a Beam command (preprocessing, batch prediction): its flags are read before Beam
loads, so a typo answers at once; then Beam's logging is made quiet and the run goes, with a
user's mistake as one line (exit 2) and Ctrl-C or SIGTERM as the stopped run's line (130, 143).

    .venv/bin/python -m preprocess.jpeg_to_tfrecord --help
"""
from common import console


def run_beam_command(parse, run, stopped_state, argv=None):
    """parse(argv) -> (settings, pipeline_args); then run(settings, pipeline_args), whose result
    is returned. stopped_state(settings) says what a stopped run left, for its one line."""
    settings, pipeline_args = console.exit_on_user_error(parse, argv)
    from common import beam_pipeline  # after the flags: Beam takes seconds to import
    beam_pipeline.configure_logging()  # before exit_on_interrupt, which filters its handlers
    with console.exit_on_interrupt(lambda: stopped_state(settings)):
        return console.exit_on_user_error(run, settings, pipeline_args)
