"""TPU readiness without a TPU, for either engine: a training step must have static shapes and compile under XLA.

The TPU runs one XLA program per step. Each engine compiles its own step on CPU
(trainer/estimator/xla_check.py: model_fn under xla.compile; trainer/keras/xla_check.py:
the Keras train_step under tf.function(jit_compile=True)); what they share is here: the
synthetic batch with the input pipeline's static shapes, the search for tensors without
a static shape (named by op), XLA's complaint in one line, the check of the losses and
step, and the command line, which it judges before TensorFlow loads (this module imports
none): --help and a typo'd flag answer at once.

    .venv/bin/python -m trainer.estimator.xla_check --model resnet --image_size 32 --train_batch_size 16
    .venv/bin/python -m trainer.keras.xla_check --model resnet --image_size 32 --train_batch_size 16
"""
import sys

import numpy as np

from common import console
from common.user_errors import UserError
from trainer.settings import checks, flags, table

# A call of a loaded function (a TF Hub backbone's SavedModel) declares the shapes it was
# traced with ([None, ...]); XLA inlines the body and sizes it from the static inputs. The
# ops inside the body are not in this graph either way, so these outputs are not checked.
FUNCTION_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


class XlaCheckError(UserError):
    """The training step is not TPU-ready: a dynamic shape or an op XLA cannot compile."""


def dynamic_shapes(operations):
    """["op 'name' (Type) output i: shape", ...] for the ops with a None dimension."""
    problems = []
    for op in operations:
        if op.type in FUNCTION_CALL_OPS:
            continue
        for i, output in enumerate(op.outputs):
            # Unknown rank is left to XLA: FusedBatchNorm's opaque reserve-space
            # outputs have it and compile fine. A known rank with a None
            # dimension is a data-dependent size (boolean_mask, unique, where).
            if output.shape.rank is not None and not output.shape.is_fully_defined():
                problems.append(f"op {op.name!r} ({op.type}) output {i}: shape {output.shape}")
    return problems


def check_static(problems, params):
    if problems:
        raise XlaCheckError(
            f"model={params['model']!r}: the training step has {len(problems)} tensor(s) "
            f"without a static shape, which the TPU compiler rejects: " + "; ".join(problems[:5]))


def make_batch(params, batch_size, seed=0, transpose=False):
    """A synthetic batch with the static shapes input_fn produces (trainer/data/input.py)."""
    from trainer.data import mix  # imports TensorFlow: here, so read_params runs before it loads
    rng = np.random.default_rng(seed)
    size = params["image_size"]
    images = rng.uniform(-1.0, 1.0, [batch_size, size, size, 3]).astype(np.float32)
    labels = rng.integers(0, params["num_classes"], [batch_size]).astype(np.int32)
    if mix.is_mixing(params):  # mixup/CutMix: float32 [B, C] shares, as the input sends them
        one_hot = np.eye(params["num_classes"], dtype=np.float32)[labels]
        lam = rng.uniform(0.0, 1.0, [batch_size, 1]).astype(np.float32)
        labels = lam * one_hot + (1.0 - lam) * one_hot[::-1]
    if transpose:
        images = images.transpose([1, 2, 3, 0])  # [S, S, 3, B]
    return images, labels, np.ones([batch_size], np.float32)


def xla_complaint(message):
    """The line of a TF error that says what XLA rejected (TF prepends traceback noise)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for marker in ("Detected unsupported operations", "compile-time constant", "XLA"):
        for line in lines:
            if marker in line:
                return line
    return lines[-1] if lines else message


def compile_error(err, params):
    return XlaCheckError(f"model={params['model']!r}: XLA cannot compile the training "
                         f"step: {xla_complaint(err.message)}")


def check_progress(losses, final_step, steps, params):
    """XlaCheckError unless every loss is finite and the step advanced once per run."""
    if not all(np.isfinite(losses)) or final_step != steps:
        raise XlaCheckError(f"model={params['model']!r}: losses {losses}, global step "
                            f"{final_step} after {steps} compiled steps")
    return losses


def read_params(prog, argv=None):
    """An engine's check's params from its command line (the trainer's flags, 10 digit classes),
    without TensorFlow: --help exits 0 here and a bad flag or value is one line, exit 2."""
    parser = flags.make_parser(description=__doc__.splitlines()[0], prog=prog)
    typed = vars(parser.parse_args(sys.argv[1:] if argv is None else argv))
    typed.pop("verbosity", None)
    typed.pop("config", None)
    sources = {key: f"flag --{key}" for key in typed}  # the parser knows only the table's settings

    def check_flags():
        params = dict(table.DEFAULTS, **{key: checks.coerce(key, value, sources[key])
                                         for key, value in typed.items()})
        params.update(num_classes=10, labels=[str(i) for i in range(10)], output_dir="/tmp/xla_check")
        checks.check_params(params, sources)
        return params
    return console.exit_on_user_error(check_flags)  # ConfigError: named, no traceback


def main(check_train_step, params, verbosity):
    """Runs an engine's check on read_params' params: one OK line, or XlaCheckError's one line, exit 2."""
    console.configure_logging(verbosity)
    losses = console.exit_on_user_error(check_train_step, params)
    print(f"OK: model={params['model']!r} trains under XLA with static shapes; losses {losses}")
