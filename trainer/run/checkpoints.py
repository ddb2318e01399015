"""What an output directory holds of an earlier run, checked before a run trusts it.

TensorFlow finds "the latest checkpoint" through one small text file, OUT/checkpoint.
Lose it (a partial `gsutil cp`, a sync tool that skips small files) and
tf.train.latest_checkpoint says "none": the next run would train again from step 0
beside the old run's checkpoints, eval records and exports. So every mode starts with
check_run_state, which looks at the checkpoint files themselves:

  * the state names a checkpoint that is here and restores: resume from it;
  * the state is missing, unreadable or names files that are gone, and checkpoint files
    are here: resume from the newest one, checked to restore, and say so in one line
    (the state file is rewritten with relative paths, so the run may move again);
  * the checkpoint to resume from is damaged (its .index or .data cut short, or its .index
    gone while its .data is here): one line naming the file, the step and the fix (an
    older intact checkpoint is named), exit 2; a warm-start source gets the same check
    (check_restores);
  * no checkpoint, but eval records, exports or checkpoint pieces of an earlier run:
    one line naming what is there, exit 2 (never a silent start from step 0);
  * nothing of an earlier run: a fresh start.

Every path it returns or writes is relative to, or joined onto, the directory as it is
now, so a moved or downloaded run (local or gs://) resumes where it is. Under the run's
lock (repair) it also removes what a save killed midway leaves: model.ckpt-<step>_temp/,
the directory TensorFlow writes a checkpoint's shards in before it moves them into place.

Both engines name their checkpoints OUT/model.ckpt-<step> and keep the same state file,
so everything here holds for either; how their contents name the variables is
trainer/run/variable_names.py.

    .venv/bin/python -m trainer.run.checkpoints OUT     # what OUT holds, and what a run would do
"""
import logging
import os
import re
import sys
import typing

import tensorflow as tf

from common import signature
from common.user_errors import UserError
from trainer.run import eval_records
from trainer.settings import saved_run

STATE_FILE = "checkpoint"  # TensorFlow's checkpoint state (a text proto)
CHECKPOINT_NAME = "model.ckpt"  # OUT/model.ckpt-<step>: Estimator's name, which the Keras engine keeps
CHECKPOINT_INDEX = saved_run.CHECKPOINT_INDEX  # OUT/model.ckpt-<step>.index, read there without TensorFlow
CHECKPOINT_PIECE = re.compile(r"^model\.ckpt-(\d+)\.(index|meta|data-\d+-of-\d+)$")
# Where a save writes its shards before moving them into place ("<prefix>_temp/part-*").
SAVE_LEFTOVER = re.compile(r"^model\.ckpt-\d+_temp")
# One line of the state file's text proto (tensorflow/python/training/checkpoint_state.proto).
STATE_LINE = re.compile(r'^(?P<key>model_checkpoint_path|all_model_checkpoint_paths|'
                        r'all_model_checkpoint_timestamps|last_preserved_timestamp): '
                        r'(?P<value>"(?:[^"\\]|\\.)*"|[-+\d.eE]+)$')
# The Keras engine's checkpoints (trainer/keras/checkpoint.py): the network's variables by name.
_LOGGER = logging.getLogger(__name__)


class CheckpointState(typing.NamedTuple):
    """The checkpoint a run resumes from, as check_run_state (or the state file) names it: read
    once by the driver and passed to what decides on it. (None, 0) for a fresh directory."""
    prefix: typing.Optional[str]
    step: int


class CheckpointError(UserError):
    """The output directory's checkpoints cannot be trusted as they are; the message says why and the fix."""


def list_checkpoints(output_dir):
    """[(step, prefix)] of the checkpoints in output_dir by their .index files, oldest first
    (saved_run.checkpoints_among, which the early check asks of a local OUT's files too)."""
    return saved_run.checkpoints_among(
        tf.io.gfile.glob(os.path.join(output_dir, f"{CHECKPOINT_NAME}-*.index")))


def parse_state(text):
    """{key: [values]} of a state file's text; ValueError when a line is not one of its fields."""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = STATE_LINE.match(line.strip())
        if not match:
            raise ValueError(f"not a checkpoint state line: {line[:60]!r}")
        fields.setdefault(match["key"], []).append(match["value"].strip('"'))
    return fields


def read_state(output_dir):
    """(basename of the checkpoint the state file names, or None; why it names none, or None).

    An absolute path (written by another tool, or before a move) counts by its basename.
    """
    path = os.path.join(output_dir, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None, f"{path} is missing"
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            fields = parse_state(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as err:  # torn or foreign
        return None, f"{path} is unreadable ({type(err).__name__})"
    if not fields.get("model_checkpoint_path"):
        return None, f"{path} names no checkpoint"
    return os.path.basename(fields["model_checkpoint_path"][0].rstrip("/")), None


def is_state_relative(output_dir):
    """True when every path in the state file is a bare file name (a moved run still finds them)."""
    with tf.io.gfile.GFile(os.path.join(output_dir, STATE_FILE), "rb") as f:
        fields = parse_state(f.read().decode("utf-8"))
    paths = fields.get("model_checkpoint_path", []) + fields.get("all_model_checkpoint_paths", [])
    return all("/" not in path for path in paths)


def restore_problem(prefix):
    """None if the checkpoint at prefix reads whole (index, every tensor); else what is wrong."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, RuntimeError, IndexError, OSError) as err:  # IndexError: a short .data file
        message = getattr(err, "message", None) or str(err)
        return message.strip().splitlines()[0][:200]
    return None


def earlier_run_evidence(output_dir):
    """What output_dir holds of an earlier training besides checkpoints ([] for a fresh dir)."""
    found = []
    pieces = [path for path in tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-*"))
              if CHECKPOINT_PIECE.match(os.path.basename(path))]  # not a save's *_temp directory
    if pieces:
        found.append(f"{len(pieces)} checkpoint file(s) without their .index ({os.path.basename(pieces[0])})")
    results = os.path.join(output_dir, eval_records.RESULTS_FILE)
    if tf.io.gfile.exists(results) and tf.io.gfile.stat(results).length:
        found.append(f"eval records ({eval_records.RESULTS_FILE})")
    for subdir in (signature.EXPORT_SUBDIR, signature.BEST_EXPORT_SUBDIR):
        if tf.io.gfile.glob(os.path.join(output_dir, subdir, "*", "*", "saved_model.pb")):
            found.append(f"exports ({subdir}/)")
    return found


def check_run_state(output_dir, repair=True, say=True):
    """The CheckpointState (prefix, step) of the checkpoint a run in output_dir resumes from, checked to restore;
    (None, 0) for a fresh directory. CheckpointError when the directory cannot be trusted.

    repair: rewrite a missing or stale state file and remove a killed save's leftovers (a run
    holding the directory's lock); off for a job beside the trainer (continuous_eval), which
    only reads. say: log a fallback from a lost state (off when the same check follows).
    """
    found = list_checkpoints(output_dir)
    named, problem = read_state(output_dir)
    if not found:
        refuse_without_checkpoints(output_dir, named)
        if repair:  # the first save killed midway: nothing to resume, its shards to remove
            remove_save_leftovers(output_dir)
        return CheckpointState(None, 0)
    refuse_lost_index(output_dir, None if problem else named, found)
    by_name = {os.path.basename(prefix): (step, prefix) for step, prefix in found}
    if named in by_name:
        step, prefix = by_name[named]
    else:
        step, prefix = found[-1]
        problem = problem or f"{os.path.join(output_dir, STATE_FILE)} names {named}, whose files are gone"
    check_restores(prefix, step, found)
    if problem and say:
        _LOGGER.warning("%s: resuming from %s (step %d), the newest checkpoint here, checked to "
                        "restore", problem, os.path.basename(prefix), step)
    if repair:
        remove_save_leftovers(output_dir)
        if problem or not is_state_relative(output_dir):
            write_state(output_dir, found, step)
    return CheckpointState(prefix, step)


def checked_state(output_dir, repair, say=True, needed_by=None):
    """check_run_state's CheckpointState; needed_by: the --mode that reads a checkpoint (evaluate,
    export, predict), refused in one line when there is none."""
    prefix, step = check_run_state(output_dir, repair=repair, say=say)
    if prefix is None and needed_by:
        raise CheckpointError(
            f"output_dir={output_dir!r} has no checkpoint to {needed_by}: train first (--mode "
            f"train_and_eval), or pass the --output_dir of a training run")
    return CheckpointState(prefix, step)


def unindexed_checkpoints(output_dir):
    """{step: prefix} of the checkpoints whose .data or .meta is here but not their .index."""
    pieces = {}
    for path in tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-*")):
        match = CHECKPOINT_PIECE.match(os.path.basename(path))
        if match:
            pieces.setdefault(int(match[1]), set()).add(match[2])
    return {step: os.path.join(output_dir, f"{CHECKPOINT_NAME}-{step}")
            for step, kinds in pieces.items() if "index" not in kinds}


def refuse_lost_index(output_dir, named, found):
    """CheckpointError when the newest checkpoint lost its .index but not its data: the one the
    state file names, or (without a usable state) one newer than every whole checkpoint.
    Never a quiet fallback to an older one. A newer one than a state naming a whole checkpoint
    is a save killed before it wrote its .index (the state is updated after it): not the run's."""
    lost = unindexed_checkpoints(output_dir)
    newest = max(lost, default=None)
    if named:
        newest = next((step for step, prefix in lost.items() if os.path.basename(prefix) == named), None)
    elif newest is not None and newest < found[-1][0]:
        newest = None
    if newest is not None:
        prefix = lost[newest]
        raise CheckpointError(damaged_message(prefix, newest, f"{os.path.basename(prefix)}.index is "
                                              f"missing (its data is here)", found))


def check_restores(prefix, step, found, purpose="resume from"):
    """CheckpointError naming the damage, the step (None: not known) and an older intact
    checkpoint among found ([(step, prefix)] of its directory) unless prefix reads whole."""
    damage = restore_problem(prefix)
    if damage:
        raise CheckpointError(damaged_message(prefix, step, damage, found, purpose))


def remove_save_leftovers(output_dir):
    """Removes model.ckpt-<step>_temp* directories: a save killed midway left them (a live save
    is the lock holder's own, and this runs under the lock before the engine saves)."""
    for path in tf.io.gfile.glob(os.path.join(output_dir, f"{CHECKPOINT_NAME}-*_temp*")):
        if SAVE_LEFTOVER.match(os.path.basename(path.rstrip("/"))) and tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
            logging.info("Removed %s, left by a checkpoint save that was killed midway", path)


def refuse_without_checkpoints(output_dir, named):
    """CheckpointError when output_dir shows an earlier run but holds no checkpoint."""
    evidence = earlier_run_evidence(output_dir)
    if named:
        evidence.insert(0, f"a {STATE_FILE} file naming {named}")
    if evidence:
        raise CheckpointError(
            f"output_dir={output_dir!r} holds {'; '.join(evidence)} of an earlier run but no "
            f"checkpoint: training would start again from step 0 beside them. Copy the "
            f"model.ckpt-* files back, or use a new --output_dir")


def damaged_message(prefix, step, damage, found, purpose="resume from"):
    """The one line for a damaged checkpoint: what is wrong, and the older intact one of found
    to `purpose` (resume from, warm start from) once the damaged files are moved away."""
    older = [(s, p) for s, p in found if step is not None and s < step and restore_problem(p) is None]
    pattern = f"{prefix}.*"
    if older:
        fix = (f"move {pattern} out of the directory to {purpose} {os.path.basename(older[-1][1])} "
               f"(step {older[-1][0]}), or restore the files from a copy")
    else:
        fix = "restore the files from a copy, or use a new --output_dir"
    at_step = "" if step is None else f" (step {step})"
    return f"checkpoint {prefix}{at_step} is damaged: {damage}; {fix}"


def write_state(output_dir, found, step):
    """OUT/checkpoint naming the checkpoint of step as the latest, every path a bare file name
    (so a moved run resumes); the ones up to it stay listed for keep_checkpoint_max."""
    kept = [os.path.basename(p) for s, p in found if s <= step]
    tf.compat.v1.train.update_checkpoint_state(output_dir, kept[-1], kept)


def latest_checkpoint(output_dir):
    """(prefix, step) of the newest checkpoint by the state file; (None, 0) if none.

    Joined onto output_dir as it is now: the state's paths are relative (Estimator writes
    them so; check_run_state rewrites older ones).
    """
    named, _ = read_state(output_dir)
    if named is None:
        return CheckpointState(None, 0)
    prefix = os.path.join(output_dir, named)
    if not tf.io.gfile.exists(prefix + ".index"):
        return CheckpointState(None, 0)
    return CheckpointState(prefix, step_of(prefix))


def describe_interrupted(output_dir, trains, mode):
    """What a run of `mode` stopped by Ctrl-C or SIGTERM leaves in output_dir: for a mode that
    trains, the step the same command resumes from (on SIGTERM and Ctrl-C both engines first
    save the step training reached)."""
    if not trains:
        return f"--mode {mode} did not finish; {output_dir} is as the training left it"
    _, step = latest_checkpoint(output_dir)
    if not step:
        return f"no checkpoint yet in {output_dir}; the same command starts training again"
    return (f"{output_dir} holds checkpoints up to step {step:,}; the same command resumes "
            f"from there")


def step_of(prefix):
    """The global step of the checkpoint at prefix: its model.ckpt-<step> name, else its global_step.
    NotFoundError when it is gone (keep_checkpoint_max deleted it meanwhile)."""
    if not tf.io.gfile.exists(prefix + ".index"):
        raise tf.errors.NotFoundError(None, None, f"checkpoint {prefix} is gone")
    match = re.match(r"^model\.ckpt-(\d+)$", os.path.basename(prefix))
    return int(match[1]) if match else int(tf.train.load_variable(prefix, "global_step"))


def main(argv):
    output_dir = argv[1]
    print("checkpoints:", [(step, os.path.basename(p)) for step, p in list_checkpoints(output_dir)])
    print("state:", read_state(output_dir))
    try:
        print("a run resumes from:", tuple(check_run_state(output_dir, repair=False)))
    except CheckpointError as err:
        print("a run refuses:", err)


if __name__ == "__main__":
    main(sys.argv)
