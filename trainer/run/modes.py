"""The modes of --mode, decided once: what each needs (checks, the lock, params.json) and the function that runs it.

trainer/run/driver.py reads a command's Mode here once and follows it; the modules below
it receive what they need (rounds.train_and_evaluate gets `evaluates`), not the mode.
Every mode of trainer/settings/table.py's MODE_TABLE has one row (tests/trainer/test_modes.py).

    .venv/bin/python -m trainer.task --output_dir OUT --mode export [--engine keras]
"""
import dataclasses
import logging
import os
import typing

import tensorflow as tf

from trainer.export import staging
from trainer.run import checkpoints, evaluations, rounds
from trainer.run import continuous_eval as continuous_eval_lib
from trainer.run.engine import Engine
from trainer.settings import table


@dataclasses.dataclass(frozen=True)
class Mode:
    """What the driver does around one mode's run function; what the mode reads is the
    settings' row (trainer/settings/table.py's MODE_TABLE), kept there once."""
    runs: typing.Callable[[Engine, dict, checkpoints.CheckpointState], typing.Any]  # -> the result
    reads: table.ModeReads
    needs_checkpoint: bool = False  # refuses in one line when OUT has no checkpoint
    checks_run_dir: bool = True  # data, checkpoints and TPU checked first (predict: its checkpoint only)
    holds_lock: bool = True  # continuous_eval runs beside the trainer that holds it; predict writes elsewhere
    writes_params: bool = True  # beside a trainer, params.json is the trainer's


    @property
    def trains(self):
        """Reads the train split: warm start checked and prepared; resumable."""
        return self.reads.trains


def of(params) -> Mode:
    """The Mode of params["mode"]: asked once, by trainer/run/driver.py."""
    return MODES[params["mode"]]


def train_and_eval(engine, params, state):
    return say_if_not_served(params, rounds.train_and_evaluate(engine, params, state, evaluates=True))


def train(engine, params, state):
    return say_if_not_served(params, rounds.train_and_evaluate(engine, params, state, evaluates=False))


def evaluate(engine, params, state):
    return evaluations.evaluate_and_record(engine, params, state.prefix, once_per_step=False)


def export(engine, params, state):
    return say_if_not_served(params, evaluations.export_latest(engine, params, state))


def predict(engine, params, state):
    # By the checked files (the driver's state), not the state file alone: a lost state must
    # not mean random weights.
    return engine.predict(state.prefix)


def continuous_eval(engine, params, _):  # it follows the checkpoints as the trainer writes them
    return continuous_eval_lib.run_continuous_eval(engine, params)


def say_if_not_served(params, export_path):
    """One line when a higher version beside export_path stays the one TF Serving serves (after
    a damaged checkpoint was moved away, its export outranks the older checkpoint's); returns
    export_path. Said, not refused: the export asked for is written, and which one to serve
    (or whether to keep the higher one) is the user's call."""
    served = staging.outranking_version(export_path) if export_path else None
    if served is None:
        return export_path
    model_base, version = os.path.split(export_path.rstrip("/"))
    prefix = os.path.join(params["output_dir"], f"{checkpoints.CHECKPOINT_NAME}-{served}")
    origin = ("" if tf.io.gfile.exists(prefix + ".index") else
              f", exported from {os.path.basename(prefix)}, which {params['output_dir']} no longer holds,")
    logging.warning("%s/%d stays the highest version%s so TF Serving keeps serving it, not this "
                    "run's version %s: move %s/%d out of %s to serve %s", model_base, served, origin,
                    version, model_base, served, model_base, version)
    return export_path


def row(name, runs, **driver_flags):
    return name, Mode(runs, table.MODE_TABLE[name], **driver_flags)


MODES = dict([
    row("train_and_eval", train_and_eval),
    row("train", train),
    row("evaluate", evaluate, needs_checkpoint=True),
    row("export", export, needs_checkpoint=True),
    row("predict", predict, needs_checkpoint=True, checks_run_dir=False, holds_lock=False),
    row("continuous_eval", continuous_eval, holds_lock=False, writes_params=False),
])
