"""TPU readiness without a TPU: the Keras engine's train_step must compile and run under XLA on CPU.

The step TPUStrategy compiles for each replica is TrainingModel.train_step
(trainer/keras/model.py). Here it runs under tf.function(jit_compile=True) on one
synthetic batch with the input pipeline's static shapes: every tensor of the traced
step must have a static shape (the op is named otherwise), XLA:CPU must compile it,
and a few steps must give finite losses and advance the step (trainer/cloud/xla.py).

Not covered: the gradient all-reduce across replicas (one replica here), infeed, TPU
memory limits. The Estimator engine's step: trainer/estimator/xla_check.py.

    .venv/bin/python -m trainer.keras.xla_check --model resnet --image_size 32 --train_batch_size 16
"""
from common import console

VERBOSITY = console.quiet_unless_verbose()  # before TensorFlow loads: it reads the environment once
from trainer.cloud import xla  # noqa: E402  (no TensorFlow: the flags are judged before it loads)
if __name__ == "__main__":  # --help and a typo'd flag answer at once
    PARAMS = xla.read_params("python -m trainer.keras.xla_check")

import tensorflow as tf  # noqa: E402

from trainer.cloud.xla import XlaCheckError  # noqa: E402,F401  (what check_train_step raises)
from trainer.keras import model as model_lib  # noqa: E402

ARGUMENT_OPS = ("Placeholder", "ReadVariableOp", "NoOp")  # the function's inputs and reads


def make_features(params, batch_size):
    images, labels, weights = xla.make_batch(params, batch_size)
    images = tf.constant(images)
    if params["use_bfloat16"]:  # as input_fn sends them
        images = tf.cast(images, tf.bfloat16)
    return {"image": images, "weight": tf.constant(weights)}, tf.constant(labels)


def check_train_step(params, batch_size=None, steps=2):
    """Compiles the Keras engine's train_step with XLA and runs it; returns the losses."""
    batch = make_features(params, batch_size or params["train_batch_size"])
    model = model_lib.build_training_model(params, tf.distribute.get_strategy())
    step = tf.function(model.train_step, jit_compile=True)
    graph = step.get_concrete_function(batch).graph
    xla.check_static(xla.dynamic_shapes(
        op for op in graph.get_operations() if op.type not in ARGUMENT_OPS), params)
    try:
        losses = [float(step(batch)["loss"]) for _ in range(steps)]
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
        raise xla.compile_error(err, params) from err
    return xla.check_progress(losses, int(model.step.numpy()), steps, params)


if __name__ == "__main__":
    xla.main(check_train_step, PARAMS, VERBOSITY)
