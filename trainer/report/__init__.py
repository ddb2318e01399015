"""What a person reads about a run: the HTML report page (python -m trainer.report OUT) and a command's closing summary.

What makes OUT a run the page can be made of is judged here, without TensorFlow, so that the
command refuses a local OUT that is not one before TensorFlow loads (trainer/report/__main__.py);
the page (trainer/report/data.py) judges any OUT, gs:// too, through TensorFlow's file access.

    .venv/bin/python -m trainer.report /nowhere    # one line, exit 2: judged before TensorFlow loads
"""
import os

from common.user_errors import UserError
from trainer.settings import table


class ReportError(UserError):
    """A run directory, export or eval data the report cannot use; the message names the fix."""


def check_run_directory(output_dir, exists):
    """ReportError unless OUT exists and holds params.json. exists: a path -> bool
    (os.path.exists for a local OUT, tf.io.gfile.exists for any)."""
    if not exists(output_dir):
        raise ReportError(f"{output_dir} does not exist; pass the --output_dir of a training run")
    if not exists(os.path.join(output_dir, table.PARAMS_FILE)):
        raise ReportError(f"{output_dir} is not a run directory (no {table.PARAMS_FILE}); "
                          "pass the --output_dir of a training run")
