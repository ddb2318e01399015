"""TPU readiness without a TPU: model_fn's training step must compile and run under XLA on CPU.

The TPU runs one XLA program per step, so the step must have static shapes and
only ops XLA can compile. This check builds model_fn's TRAIN graph exactly as
TPUEstimator does on a TPU (params use_tpu=True: no summary or string ops in
the step, summaries via host_call) inside tf.compat.v1.xla.experimental.compile,
the XLA counterpart of tpu.rewrite, then

  1. rejects any tensor of the step whose shape is not fully static, naming the op;
  2. compiles the step with XLA:CPU and runs it for a few steps, checking that
     the loss is finite and the global step advances.

Not covered: CrossShardOptimizer's CrossReplicaSum (no XLA:CPU kernel; on one
replica it is the identity, so it is swapped out here), infeed/outfeed, TPU
memory limits and multi-core sharding.

    .venv/bin/python -m trainer.estimator.xla_check --model resnet --image_size 32 --train_batch_size 16
"""
import sys
from unittest import mock

from common import console
from common.user_errors import UserError

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from trainer.settings import chain, checks, flags, table  # noqa: E402
from trainer.estimator import model

XLA_COMPILE_ATTR = "_xla_compile_id"  # set by xla.compile on every op of the computation
# A call of a loaded function (a TF Hub backbone's SavedModel) declares the shapes it was
# traced with ([None, ...]); XLA inlines the body and sizes it from the static inputs. The
# ops inside the body are not in this graph either way, so these outputs are not checked.
FUNCTION_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


class XlaCheckError(UserError):
    """The training step is not TPU-ready: a dynamic shape or an op XLA cannot compile."""


def dynamic_shapes(graph):
    """["op 'name' (Type) output i: shape", ...] for compiled ops with a None dimension."""
    problems = []
    for op in graph.get_operations():
        if XLA_COMPILE_ATTR not in op.node_def.attr or op.type in FUNCTION_CALL_OPS:
            continue
        for i, output in enumerate(op.outputs):
            # Unknown rank is left to XLA: FusedBatchNorm's opaque reserve-space
            # outputs have it and compile fine. A known rank with a None
            # dimension is a data-dependent size (boolean_mask, unique, where).
            if output.shape.rank is not None and not output.shape.is_fully_defined():
                problems.append(f"op {op.name!r} ({op.type}) output {i}: shape {output.shape}")
    return problems


def make_step_fn(params):
    """step(images, labels, weights) -> loss, running one optimizer step of model_fn."""
    def step(images, labels, weights):
        features = {"image": images, "weight": weights}
        spec = model.model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, params)
        with tf.control_dependencies([spec.train_op]):
            return tf.identity(spec.loss)
    return step


def make_batch(params, batch_size, seed=0):
    """A synthetic batch with the static shapes input_fn produces (trainer/data/input.py)."""
    rng = np.random.default_rng(seed)
    size = params["image_size"]
    images = rng.uniform(-1.0, 1.0, [batch_size, size, size, 3]).astype(np.float32)
    if params["transpose_input"]:
        images = images.transpose([1, 2, 3, 0])  # [S, S, 3, B]
    labels = rng.integers(0, params["num_classes"], [batch_size]).astype(np.int32)
    return images, labels, np.ones([batch_size], np.float32)


def check_train_step(params, batch_size=None, steps=2):
    """Compiles model_fn's TRAIN step with XLA and runs it; returns the losses.

    Raises XlaCheckError naming the dynamic-shaped op or XLA's first complaint.
    """
    params = dict(params, use_tpu=True)
    batch_size = batch_size or params["train_batch_size"]
    graph = tf.Graph()
    with graph.as_default():
        batch = [tf.constant(array) for array in make_batch(params, batch_size)]
        if params["use_bfloat16"]:  # as input_fn sends them
            batch[0] = tf.cast(batch[0], tf.bfloat16)
        global_step = tf.compat.v1.train.get_or_create_global_step()  # outside, as TPUEstimator does
        # CrossReplicaSum has no XLA:CPU kernel; with one replica it is the identity.
        with mock.patch.object(tf.compat.v1.tpu, "CrossShardOptimizer", lambda optimizer: optimizer):
            (loss,) = tf.compat.v1.xla.experimental.compile(make_step_fn(params), batch)
        problems = dynamic_shapes(graph)
        if problems:
            raise XlaCheckError(
                f"model={params['model']!r}: the training step has {len(problems)} tensor(s) "
                f"without a static shape, which the TPU compiler rejects: " + "; ".join(problems[:5]))
        return run_compiled(graph, loss, global_step, steps, params)


def xla_complaint(message):
    """The line of a TF error that says what XLA rejected (TF prepends traceback noise)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for marker in ("Detected unsupported operations", "compile-time constant", "XLA"):
        for line in lines:
            if marker in line:
                return line
    return lines[-1] if lines else message


def run_compiled(graph, loss, global_step, steps, params):
    """Runs the compiled step; XlaCheckError with XLA's message if it does not compile."""
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        try:
            losses = [float(session.run(loss)) for _ in range(steps)]
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
            raise XlaCheckError(f"model={params['model']!r}: XLA cannot compile the training "
                                f"step: {xla_complaint(err.message)}") from err
        final_step = int(session.run(global_step))
    if not all(np.isfinite(losses)) or final_step != steps:
        raise XlaCheckError(f"model={params['model']!r}: losses {losses}, global step "
                            f"{final_step} after {steps} compiled steps")
    return losses


def main(argv=None):
    parser = flags.make_parser(description=__doc__.splitlines()[0],
                               prog="python -m trainer.estimator.xla_check")
    typed = vars(parser.parse_args(sys.argv[1:] if argv is None else argv))
    typed.pop("verbosity", None)
    typed.pop("config", None)
    console.configure_logging(VERBOSITY)
    try:
        params, sources = chain.merge(table.DEFAULTS, {}, typed, "flags")
        params.update(num_classes=10, labels=[str(i) for i in range(10)], output_dir="/tmp/xla_check")
        checks.check_params(params, sources)
        losses = check_train_step(params)
    except UserError as err:  # ConfigError, XlaCheckError: named, no traceback
        console.exit_with_error(err)
    print(f"OK: model={params['model']!r} trains under XLA with static shapes; losses {losses}")


if __name__ == "__main__":
    main()
