"""TPU readiness without a TPU: model_fn's training step must compile and run under XLA on CPU.

This check builds model_fn's TRAIN graph exactly as TPUEstimator does on a TPU
(params use_tpu=True: no summary or string ops in the step, summaries via host_call)
inside tf.compat.v1.xla.experimental.compile, the XLA counterpart of tpu.rewrite, then

  1. rejects any tensor of the step whose shape is not fully static, naming the op;
  2. compiles the step with XLA:CPU and runs it for a few steps, checking that
     the loss is finite and the global step advances (trainer/cloud/xla.py).

Not covered: CrossShardOptimizer's CrossReplicaSum (no XLA:CPU kernel; on one
replica it is the identity, so it is swapped out here), infeed/outfeed, TPU
memory limits and multi-core sharding. The Keras engine's step: trainer/keras/xla_check.py.

    .venv/bin/python -m trainer.estimator.xla_check --model resnet --image_size 32 --train_batch_size 16
"""
import importlib.util
from unittest import mock

from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once
from trainer.cloud import xla  # noqa: E402  (no TensorFlow: the flags are judged before it loads)
if __name__ == "__main__" and importlib.util.find_spec("tensorflow_estimator") is None:  # .venv-keras
    console.exit_with_error("python -m trainer.estimator.xla_check needs tensorflow-estimator "
                            "(TensorFlow <= 2.15), not installed here: use the .venv environment, "
                            "or python -m trainer.keras.xla_check for the Keras engine")
if __name__ == "__main__":  # --help and a typo'd flag answer at once
    PARAMS = xla.read_params("python -m trainer.estimator.xla_check")

import tensorflow as tf  # noqa: E402

from trainer.cloud.xla import XlaCheckError  # noqa: E402,F401  (what check_train_step raises)
from trainer.estimator import model  # noqa: E402

XLA_COMPILE_ATTR = "_xla_compile_id"  # set by xla.compile on every op of the computation


def make_step_fn(params):
    """step(images, labels, weights) -> loss, running one optimizer step of model_fn."""
    def step(images, labels, weights):
        features = {"image": images, "weight": weights}
        spec = model.model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, params)
        with tf.control_dependencies([spec.train_op]):
            return tf.identity(spec.loss)
    return step


def check_train_step(params, batch_size=None, steps=2):
    """Compiles model_fn's TRAIN step with XLA and runs it; returns the losses.

    Raises XlaCheckError naming the dynamic-shaped op or XLA's first complaint.
    """
    params = dict(params, use_tpu=True)
    batch_size = batch_size or params["train_batch_size"]
    graph = tf.Graph()
    with graph.as_default():
        batch = [tf.constant(array) for array in
                 xla.make_batch(params, batch_size, transpose=params["transpose_input"])]
        if params["use_bfloat16"]:  # as input_fn sends them
            batch[0] = tf.cast(batch[0], tf.bfloat16)
        global_step = tf.compat.v1.train.get_or_create_global_step()  # outside, as TPUEstimator does
        # CrossReplicaSum has no XLA:CPU kernel; with one replica it is the identity.
        with mock.patch.object(tf.compat.v1.tpu, "CrossShardOptimizer", lambda optimizer: optimizer):
            (loss,) = tf.compat.v1.xla.experimental.compile(make_step_fn(params), batch)
        compiled = [op for op in graph.get_operations() if XLA_COMPILE_ATTR in op.node_def.attr]
        xla.check_static(xla.dynamic_shapes(compiled), params)
        return run_compiled(graph, loss, global_step, steps, params)


def session_config():
    """Grappler off: XLA then compiles the step's ops as model_fn made them, not grappler's CPU
    rewrites of them (which could only fold some away), and the check skips grappler's passes
    over the step and its function library, a large part of its time on an ImageNet network
    (figures: docs/benchmarks.md, "Measured figures behind choices in the code")."""
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def run_compiled(graph, loss, global_step, steps, params):
    """Runs the compiled step; XlaCheckError with XLA's message if it does not compile."""
    with tf.compat.v1.Session(graph=graph, config=session_config()) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        try:
            losses = [float(session.run(loss)) for _ in range(steps)]
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
            raise xla.compile_error(err, params) from err
        final_step = int(session.run(global_step))
    return xla.check_progress(losses, final_step, steps, params)


if __name__ == "__main__":
    xla.main(check_train_step, PARAMS, VERBOSITY)
