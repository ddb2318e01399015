"""The architectures: Keras models from images to float32 logits, usable by model_fn and model.fit.

    .venv/bin/python -m pytest tests/trainer/test_nets.py
"""
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from trainer import nets
from trainer.nets import applications
from trainer.settings import table

OPTIONS = {"small_cnn": {"cnn_filters": [4, 8], "dense_units": 8, "dropout_rate": 0.0},
           "resnet": {"resnet_depth": 8, "resnet_width": 4},
           **{name: {"freeze_backbone": False, "dropout_rate": 0.0, "batch_norm_momentum": 0.9}
              for name in applications.APPLICATIONS}}


@pytest.mark.parametrize("name", ["small_cnn", "resnet"])
@pytest.mark.parametrize("use_bfloat16", [False, True])
def test_network_maps_images_to_float32_logits(name, use_bfloat16):
    network = nets.build_network(name, num_classes=5, image_size=16, use_bfloat16=use_bfloat16,
                                 **OPTIONS[name])
    logits = network(np.zeros([2, 16, 16, 3], np.float32), training=False)
    assert logits.shape == (2, 5) and logits.dtype == tf.float32
    assert all(v.dtype == tf.float32 for v in network.variables)  # bfloat16 computes, float32 stores


def test_efficientnet_in_bfloat16_has_float32_variables_and_logits_and_freezes():
    """Built in graph mode, as model_fn builds it (and cheaper than eagerly); the other
    keras.applications networks are built by tests/trainer/test_xla_check.py."""
    with tf.Graph().as_default(), nets.fixed_learning_phase():
        network = nets.build_network("efficientnet_b0", num_classes=5, image_size=32,
                                     use_bfloat16=True, freeze_backbone=True, dropout_rate=0.2,
                                     batch_norm_momentum=0.5)
        logits = network(tf.zeros([2, 32, 32, 3], tf.bfloat16), training=False)
    assert logits.shape.as_list() == [2, 5] and logits.dtype == tf.float32
    # Every float variable float32, the input Normalization's too (float32_normalization).
    assert {v.dtype.base_dtype for v in network.variables} == {tf.float32, tf.int64}
    assert len(network.variables) == 314  # EfficientNetB0 without its ImageNet top, plus the head
    assert [layer.name for layer in network.layers] == [
        "images", "imagenet_input", "backbone", "pool", "dropout", "logits"]
    # freeze_backbone: only the head trains; Keras then runs the backbone's BN in inference mode.
    assert [v.name for v in network.trainable_variables] == ["logits/kernel:0", "logits/bias:0"]
    assert nets.backbone_of(network).trainable is False
    momenta = {layer.momentum for layer in nets.backbone_of(network).layers
               if isinstance(layer, tf.keras.layers.BatchNormalization)}
    assert momenta == {0.5}  # keras.applications' own 0.99 replaced
    assert nets.backbone_of(nets.build_network("resnet", 3, 16, **OPTIONS["resnet"])) is None


def imagenet_preprocess(name, images_01):
    """keras.applications' own preprocess_input for name, on [0, 1] RGB images."""
    module = {"resnet50": tf.keras.applications.resnet50,
              "efficientnet_b0": tf.keras.applications.efficientnet,
              "mobilenet_v2": tf.keras.applications.mobilenet_v2}[name]
    return module.preprocess_input(images_01 * 255.0)


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_imagenet_input_matches_keras_preprocess_input(name):
    """[-1, 1] images (common/image_ops) become exactly what the ImageNet weights expect."""
    images_01 = np.random.default_rng(0).uniform(0, 1, [2, 4, 4, 3]).astype(np.float32)
    convert = applications.APPLICATIONS[name][1]
    ours = images_01 * 2 - 1
    if convert:
        ours = applications.ImageNetInput(*convert())(ours).numpy()
    np.testing.assert_allclose(ours, imagenet_preprocess(name, images_01), rtol=1e-5, atol=1e-3)


def test_efficientnet_input_is_standardised_once():
    """EfficientNet: our constants + its own Rescaling(1/255) + a pinned Normalization
    = (x01 - ImageNet mean) / ImageNet std per channel."""
    images_01 = np.random.default_rng(1).uniform(0, 1, [1, 4, 4, 3]).astype(np.float32)
    scale, offset, reverse = applications.torch_input_times_255()
    into_backbone = applications.ImageNetInput(scale, offset, reverse)(images_01 * 2 - 1)
    normalization = tf.keras.layers.Normalization()
    normalization.build([None, 4, 4, 3])
    normalization.set_weights([np.full([3], 0.4), np.full([3], 0.05), np.array(1, np.int64)])
    applications.pin_input_normalization(tf.keras.Sequential([normalization]))
    seen = normalization(tf.keras.layers.Rescaling(1 / 255)(into_backbone)).numpy()
    expected = (images_01 - np.array(applications.TORCH_MEAN_RGB)) / np.array(applications.TORCH_STD_RGB)
    np.testing.assert_allclose(seen, expected, rtol=1e-5, atol=1e-5)


def keras_own_preprocessing(name):
    """The layers keras.applications puts in front of name's network (include_preprocessing=True),
    taken from a build of the same code with one narrow block per stage (seconds, not minutes)."""
    constructor = applications.APPLICATIONS[name].constructor_of()
    module = sys.modules[constructor.__module__]
    small = dict(include_top=False, weights=None, input_shape=(32, 32, 3), include_preprocessing=True)
    if name.startswith("convnext"):
        built = module.ConvNeXt(depths=[1] * 4, projection_dims=[8] * 4, model_name=name, **small)
    else:
        built = module.EfficientNetV2(width_coefficient=0.1, depth_coefficient=0.1, default_size=32,
                                      model_name=name.replace("_", "-"), **small)
    first = [layer for layer in built.layers[1:4]
             if isinstance(layer, (tf.keras.layers.Rescaling, tf.keras.layers.Normalization))]
    assert first, [layer.name for layer in built.layers[:4]]
    return tf.keras.Sequential(first)


@pytest.mark.parametrize("name", ["efficientnetv2_b0", "efficientnetv2_s", "convnext_tiny"])
def test_new_networks_convert_their_input_as_keras_own_preprocessing_does(name):
    """[-1, 1] images through ImageNetInput = 0-255 images through the network's own Keras
    preprocessing layers, which this project builds without (include_preprocessing=False)."""
    images_01 = np.random.default_rng(2).uniform(0, 1, [2, 4, 4, 3]).astype(np.float32)
    ours = applications.ImageNetInput(*applications.APPLICATIONS[name].convert())(images_01 * 2 - 1)
    theirs = keras_own_preprocessing(name)(images_01 * 255.0)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    assert applications.APPLICATIONS[name].options["include_preprocessing"] is False


@pytest.mark.parametrize("name", ["efficientnetv2_b0", "convnext_tiny"])
def test_new_networks_build_in_bfloat16_freeze_and_convert_their_input_once(name):
    """Built in graph mode as model_fn builds them; efficientnetv2_s is built by the XLA check."""
    options = {key: value for key, value in OPTIONS[name].items() if key in table.NETWORKS[name].options}
    with tf.Graph().as_default(), nets.fixed_learning_phase():
        network = nets.build_network(name, num_classes=5, image_size=32, use_bfloat16=True,
                                     **dict(options, freeze_backbone=True))
        logits = network(tf.zeros([2, 32, 32, 3], tf.bfloat16), training=False)
    assert logits.shape.as_list() == [2, 5] and logits.dtype == tf.float32
    assert {v.dtype.base_dtype for v in network.variables} == {tf.float32}
    assert [layer.name for layer in network.layers][:3] == ["images", "imagenet_input", "backbone"]
    assert [v.name for v in network.trainable_variables] == ["logits/kernel:0", "logits/bias:0"]
    inside = [layer for layer in nets.backbone_of(network).layers
              if isinstance(layer, (tf.keras.layers.Rescaling, tf.keras.layers.Normalization))]
    assert not inside  # the input is converted once, by imagenet_input


def test_options_are_explicit_and_come_from_params():
    """No default is filled in here: a missing option is named; params supply them all."""
    with pytest.raises(ValueError, match=re.escape("got ['resnet_depth']")):
        nets.build_network("resnet", num_classes=3, image_size=16, resnet_depth=20)
    params = dict(OPTIONS["small_cnn"], resnet_depth=20, resnet_width=4, model="resnet")
    network = nets.build_network("resnet", 3, 16, **nets.network_options("resnet", params))
    assert network.name == "resnet20"


def test_keras_fit_trains_the_same_model():
    """bench/ fits these models with Keras: one fit step must run and change the weights."""
    network = nets.build_network("small_cnn", num_classes=3, image_size=16, **OPTIONS["small_cnn"])
    network.compile(optimizer="adam",
                    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.copy() for w in network.get_weights()]
    network.fit(np.random.rand(8, 16, 16, 3).astype(np.float32), np.arange(8) % 3,
                batch_size=4, epochs=1, verbose=0)
    assert any(not np.array_equal(a, b) for a, b in zip(before, network.get_weights()))


@pytest.mark.parametrize("name, options, message", [
    ("vgg", {}, "model='vgg' is not one of"),
    ("resnet", {"cnn_filters": [4]}, "takes options"),
    ("resnet", dict(OPTIONS["resnet"], resnet_depth=10), "resnet_depth=10 must be 6n+2"),
    ("small_cnn", dict(OPTIONS["small_cnn"], cnn_filters=[4, 4, 4, 4, 4]),
     "image_size=16 is too small"),
    ("mobilenet_v2", OPTIONS["mobilenet_v2"], "model='mobilenet_v2' needs image_size >= 32"),
    ("hub", {"hub_module": None, "freeze_backbone": False, "dropout_rate": 0.0, "batch_norm_momentum": 0.9},
     "model='hub' needs hub_module"),
])
def test_bad_network_settings_name_the_value(name, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        nets.build_network(name, num_classes=3, image_size=16, **options)
