"""One network definition for both Keras (trainer/nets): the Keras 3 build and its tf-keras twin
hold the same variables in the same order, each named in checkpoints as tf-keras names it
(trainer/jax/checkpoint.py twin_names), and answer alike with the same weights.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_nets.py
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer import nets
from trainer.jax import checkpoint
from trainer.run import variable_names
from trainer.settings import table

pytestmark = pytest.mark.slow  # two ImageNet networks built twice each


# mobilenet_v2: Keras 3 names a depthwise kernel "kernel"; convnext_tiny: a nested block's layers
# under the block's name. small_cnn and resnet: tests/trainer/jax/test_jax_engine.py's runs.
@pytest.mark.parametrize("name", ["mobilenet_v2", "convnext_tiny"])
def test_weights_move_by_their_tf_keras_names_and_the_twins_answer_alike(name):
    options = nets.network_options(name, table.DEFAULTS)
    keras.backend.clear_session()
    ours = nets.build_network(name, 5, 32, keras=keras, **options)
    rng = np.random.default_rng(0)
    for variable in ours.weights:  # away from the initial values, which might agree by chance
        variable.assign(variable.numpy() + rng.normal(0, 0.01, variable.shape).astype(variable.dtype))
    tf.keras.backend.clear_session()
    twin = nets.build_network(name, 5, 32, **options)
    names = checkpoint.twin_names(ours, twin)
    assert any(v.path != names[id(v)] for v in ours.weights)  # the renaming this test is about
    by_name = {names[id(v)]: v.numpy() for v in ours.weights}
    for variable in twin.weights:
        variable.assign(by_name[variable_names.variable_name(variable)])
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    assert np.abs(np.asarray(ours(images, training=False)) - twin(images, training=False).numpy()).max() <= 1e-5


def test_builds_of_other_shapes_are_refused():
    keras.backend.clear_session()
    ours = nets.build_network("small_cnn", 3, 16, keras=keras, cnn_filters=[4], dense_units=8, dropout_rate=0.1)
    tf.keras.backend.clear_session()
    twin = nets.build_network("small_cnn", 3, 16, cnn_filters=[4], dense_units=9, dropout_rate=0.1)
    with pytest.raises(ValueError, match="the Keras 3 build and its tf-keras twin differ"):
        checkpoint.twin_names(ours, twin)
