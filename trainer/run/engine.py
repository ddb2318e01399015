"""The seam between the run room and an engine: what trainer/run/driver.py and the modes call.

Both engines implement it (trainer/estimator/engine.py EstimatorEngine, trainer/keras/engine.py
KerasEngine) and name it as their base, so a reader jumps from a call in rounds.py to here,
and tests/trainer/test_engine_protocol.py holds each to every member with the same
parameters. An engine is made by the driver once the run's checks have passed.

    .venv/bin/python -c "from trainer.run.engine import Engine; print([m for m in vars(Engine) if not m.startswith('_')])"
"""
import typing


@typing.runtime_checkable
class Engine(typing.Protocol):
    """One engine of one run directory (params["output_dir"])."""

    eval_dir: str  # where its evaluation events go (OUT/eval), for the pictures beside them

    def train(self, max_steps: int) -> typing.Any:
        """Trains from the latest checkpoint of OUT to max_steps, writing checkpoints there."""

    def evaluate(self, checkpoint_path: str) -> dict:
        """{metric: value, ..., CONFUSION_MATRIX_METRIC: [C, C]} of one checkpoint over the eval set."""

    def export(self, checkpoint_path: str, staging_base: str) -> str:
        """The SavedModel directory it wrote under staging_base from that checkpoint."""

    def predict(self, checkpoint_path: str) -> dict:
        """--mode predict with that checkpoint; its summary."""
