"""Failures a user can fix that surface mid-run as library errors, turned into one line.

A full disk shows up as TensorFlow's ResourceExhaustedError (or an OSError) deep inside
a checkpoint save or an export, with a 130-line traceback. Nothing already written is
lost (checkpoints and exports are written aside and renamed), so the line says so, names
the directory and how to go on.

    .venv/bin/python -c "import errno; from trainer.run import failures; print(failures.explain(OSError(errno.ENOSPC, 'No space left on device'), {'output_dir': 'OUT'}))"
"""
import errno

import tensorflow as tf

from common.user_errors import UserError

NO_SPACE = "No space left on device"


class DiskFull(UserError):
    """The output directory's disk filled up mid-run."""


def explain(err, params):
    """A UserError naming the fix for err, or None when err is not one of these failures."""
    is_os_full = isinstance(err, OSError) and err.errno == errno.ENOSPC
    is_tf_full = isinstance(err, tf.errors.OpError) and NO_SPACE in (err.message or "")
    if not (is_os_full or is_tf_full):
        return None
    return DiskFull(f"no space left on device while writing to {params['output_dir']}: nothing "
                    f"written before is lost; free space there and run the same command again "
                    f"to resume from the last checkpoint")
