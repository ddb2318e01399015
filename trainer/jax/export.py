"""The JAX engine's export: the trained weights in the network's tf-keras twin, exported as the Keras engine exports.

A JAX export (jax2tf, Keras 3's model.export) does not serve here: TensorFlow 2.15 and TF
Serving's CPU build cannot run its XlaCallModule ops, and the JPEG decode cannot live
inside a JAX function (docs/migration.md). So the network is built a second time with
tf.keras (trainer/nets: the same layers in the same order, hence the same names), the
checkpoint's weights (its moving averages, when kept) are read into it by name, and
trainer/keras/export.py writes the SavedModel: the same signatures, inputs, outputs and
label_names:0 as every engine's, served by TF 2.15 and 2.20, the stand-in, batch
prediction and trainer.export_tflite unchanged.

    .venv-jax/bin/python -m trainer.task --engine jax --mode export --output_dir OUT
    .venv-keras/bin/python -m trainer.export_tflite --output_dir OUT    # a JAX run's, no JAX needed
"""
import tensorflow as tf

from trainer import nets
from trainer.keras import export as keras_export


def build_twin(params):
    """The network as tf.keras builds it, named as the Keras 3 one (fresh layer names)."""
    tf.keras.backend.clear_session()
    return nets.build_from_params(params)


def write_saved_model(params, checkpoint_path, staging_base):
    """Writes the SavedModel of checkpoint_path to staging_base/<timestamp>/; returns that path."""
    return keras_export.write_saved_model(build_twin(params), params, checkpoint_path, staging_base)


class TwinExport:
    """The export half of the JAX engine, which needs no JAX: trainer.export_tflite exports a JAX
    run's checkpoint with it in any environment with tf-keras (.venv-keras too)."""

    def __init__(self, params):
        self.params = params

    def export(self, checkpoint_path, staging_base):
        return write_saved_model(self.params, checkpoint_path, staging_base)
