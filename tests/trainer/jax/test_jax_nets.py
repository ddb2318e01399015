"""One network definition for both Keras (trainer/nets): the Keras 3 build and its tf-keras twin
hold the same variables in the same order, each named in checkpoints as tf-keras names it
(trainer/jax/checkpoint.py tf_keras_names, from the Keras 3 build alone), and answer alike with
the same weights.

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

pytestmark = pytest.mark.slow(reason="two ImageNet networks built twice each, with both Keras")


def build_both(name):
    """(the Keras 3 build, the tf-keras twin) of network name: 5 classes, 32 px."""
    options = nets.network_options(name, table.DEFAULTS)
    keras.backend.clear_session()
    ours = nets.build_network(name, 5, 32, keras=keras, **options)
    tf.keras.backend.clear_session()
    return ours, nets.build_network(name, 5, 32, **options)


def check_named_as_the_twin(ours, twin):
    """tf_keras_names of ours: each weight named as the twin's at its place, shapes alike."""
    names = checkpoint.tf_keras_names(ours)
    assert [tuple(v.shape) for v in ours.weights] == [tuple(v.shape) for v in twin.weights]
    assert [names[id(v)] for v in ours.weights] == [variable_names.variable_name(v) for v in twin.weights]
    return names


# The engine runs' networks (tests/trainer/jax/test_jax_engine.py); the efficientnets' depthwise
# kernels are mobilenet_v2's case below, resnet50 renames nothing (each built twice: 15-45 s).
@pytest.mark.parametrize("name", ["small_cnn", "resnet"])
def test_each_weight_is_named_as_the_tf_keras_twin_names_it_at_its_place(name):
    check_named_as_the_twin(*build_both(name))


# mobilenet_v2: Keras 3 names a depthwise kernel "kernel"; convnext_tiny: a nested block's layers
# under the block's name, and its layer scale "variable_N".
@pytest.mark.parametrize("name", ["mobilenet_v2", "convnext_tiny"])
def test_weights_move_by_their_tf_keras_names_and_the_twins_answer_alike(name):
    ours, twin = build_both(name)
    rng = np.random.default_rng(0)
    for variable in ours.weights:  # away from the initial values, which might agree by chance
        variable.assign(variable.numpy() + rng.normal(0, 0.01, variable.shape).astype(variable.dtype))
    names = check_named_as_the_twin(ours, twin)
    assert any(v.path != names[id(v)] for v in ours.weights)  # the renaming this test is about
    by_name = {names[id(v)]: v.numpy() for v in ours.weights}
    for variable in twin.weights:
        variable.assign(by_name[variable_names.variable_name(variable)])
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    assert np.abs(np.asarray(ours(images, training=False)) - twin(images, training=False).numpy()).max() <= 1e-5
