"""The seam between the run room and an engine: what trainer/run/driver.py and the modes call.

Every engine implements it (trainer/estimator/engine.py EstimatorEngine, trainer/keras/engine.py
KerasEngine, trainer/jax/engine.py JaxEngine) and names it as their base, so a reader jumps from
a call in rounds.py to here, and tests/trainer/test_engine_protocol.py holds each to every member
with the same parameters. An engine is made by the driver once the run's checks have passed.

A run may be several processes, one per host of a TPU slice (the JAX engine's), sharing one
OUT: Processes says which of them writes OUT and hands its answers to the others. An engine of
one process answers with ONE_PROCESS (it writes, and its answer is its own).

    .venv/bin/python -c "from trainer.run.engine import Engine; print([m for m in vars(Engine) if not m.startswith('_')])"
"""
import typing


@typing.runtime_checkable
class Processes(typing.Protocol):
    """The processes of one run: one of them (the writer) writes OUT, every one reads it."""

    is_writer: bool  # this process writes OUT: its lock, params.json, checkpoints, records, exports

    def from_writer(self, name: str, write: typing.Callable[[], typing.Any]) -> typing.Any:
        """write() run by the writer alone; its result on every process once it returned (what
        the writer wrote is then whole for all to read), or the exception it raised raised on
        every process (a refusal reaches them all). name: the same on every process."""


class OneProcess:
    """The run is this process: it writes, and what it writes is its own answer."""

    is_writer = True

    def from_writer(self, name, write):
        return write()


ONE_PROCESS = OneProcess()


@typing.runtime_checkable
class Engine(typing.Protocol):
    """One engine of one run directory (params["output_dir"])."""

    eval_dir: str  # where its evaluation events go (OUT/eval), for the pictures beside them
    processes: Processes = ONE_PROCESS  # the run's processes; a one-process engine keeps this

    def train(self, max_steps: int) -> typing.Any:
        """Trains from the latest checkpoint of OUT to max_steps, writing checkpoints there."""

    def evaluate(self, checkpoint_path: str) -> dict:
        """{metric: value, ..., CONFUSION_MATRIX_METRIC: [C, C]} of one checkpoint over the eval set."""

    def export(self, checkpoint_path: str, staging_base: str) -> str:
        """The SavedModel directory it wrote under staging_base from that checkpoint."""

    def predict(self, checkpoint_path: str) -> dict:
        """--mode predict with that checkpoint; its summary."""
