"""ImageNet networks from tf.keras.applications, built without weights, with this project's head.

resnet50 (the ImageNet bottleneck ResNet), efficientnet_b0, mobilenet_v2,
efficientnetv2_b0, efficientnetv2_s and convnext_tiny are built with weights=None
and include_top=False: nothing is downloaded. ImageNet
weights come from a Keras weights file the user downloaded, through
--warm_start_from (trainer/run/warm_start.py, which calls load_backbone_weights).

Input: images arrive in [-1, 1] (common/image_ops.py, the one image path of
training, evaluation and serving). An ImageNetInput layer in front of the
backbone turns them into exactly what each network's published ImageNet
weights were trained on (keras.applications' preprocess_input):
  resnet50         "caffe": BGR channel order, 0-255, ImageNet mean pixel subtracted;
  mobilenet_v2     "tf": [-1, 1] as they are (no layer);
  efficientnet_b0  "torch"-style standardisation ((x/255 - mean) / std per RGB channel).
    The Keras EfficientNet carries Rescaling(1/255) and a Normalization layer
    inside; with weights=None that Normalization is the identity (mean 0,
    variance 1) and load_backbone_weights pins it there again after loading a
    file (Keras' ImageNet build adds an extra Rescaling to correct the file's
    stored statistics, tensorflow#49930, which a weights=None build lacks).
    The standardisation is done here, with constants, in front of the backbone:
    the network sees the same values from scratch and after loading ImageNet weights.
  efficientnetv2_b0, convnext_tiny  "torch"-style standardisation, as Keras' own
    Rescaling + Normalization (constants: no variables) compute it;
  efficientnetv2_s  x255 / 128 - 1, as Keras' own Rescaling(1/128, offset=-1).
    These three are built with include_preprocessing=False: their conversion is
    ImageNetInput's alone, so the input is converted once, and the weights file (the
    same variables with or without Keras' preprocessing layers) loads either way.
The head: global average pooling, dropout, a float32 Dense "logits" layer
(the variables warm start leaves fresh by default).

Built with either Keras: tf.keras (Keras 2: the Estimator and Keras engines) or Keras 3 (the
JAX engine), from the same keras.applications constructor of each, so the variables come in
the same order under the same names and weights move between them.

    .venv/bin/python -c "from trainer import nets; nets.build_network('mobilenet_v2', 5, 64, freeze_backbone=False, dropout_rate=0.2, batch_norm_momentum=0.9).summary()"
"""
import contextlib
import functools
import sys
import typing
from unittest import mock

import numpy as np
import tensorflow as tf

from trainer.settings import table

layers = tf.keras.layers
BACKBONE = "backbone"  # layer name of the backbone inside every network that has one
# ImageNet statistics of keras.applications.imagenet_utils (RGB, pixels in 0-255 or 0-1).
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)
TORCH_MEAN_RGB = (0.485, 0.456, 0.406)
TORCH_STD_RGB = (0.229, 0.224, 0.225)


def caffe_input():
    """(scale, offset, reverse): [-1, 1] RGB -> BGR in 0-255 minus the mean pixel."""
    return 127.5, [127.5 - mean for mean in CAFFE_MEAN_BGR], True


def torch_input_times_255():
    """(scale, offset, reverse): [-1, 1] -> 255 * ((x01 - mean) / std), before EfficientNet's
    own Rescaling(1/255); x01 = (x + 1) / 2."""
    std, mean = np.array(TORCH_STD_RGB), np.array(TORCH_MEAN_RGB)
    return list(127.5 / std), list(255.0 * (0.5 - mean) / std), False


def torch_input():
    """(scale, offset, reverse): [-1, 1] -> (x01 - mean) / std per RGB channel; x01 = (x + 1) / 2."""
    std, mean = np.array(TORCH_STD_RGB), np.array(TORCH_MEAN_RGB)
    return list(0.5 / std), list((0.5 - mean) / std), False


def efficientnetv2_input():
    """(scale, offset, reverse): [-1, 1] -> x255 / 128 - 1, EfficientNetV2-S's own Rescaling."""
    return 127.5 / 128.0, 127.5 / 128.0 - 1.0, False


class Application(typing.NamedTuple):
    """A keras.applications network: its constructor's name, the conversion of [-1, 1] images to
    its weights' input (None: [-1, 1] as is) and the constructor's other arguments."""
    constructor: str
    convert: object
    options: dict = {}

    def constructor_of(self, keras=tf.keras):
        """The constructor in keras.applications of that Keras (tf.keras or Keras 3)."""
        return getattr(keras.applications, self.constructor)


# Their own preprocessing off (include_preprocessing=False): the conversion is ImageNetInput's.
NO_PREPROCESSING = {"include_preprocessing": False}
APPLICATIONS = {
    "resnet50": Application("ResNet50", caffe_input),
    "efficientnet_b0": Application("EfficientNetB0", torch_input_times_255),
    "mobilenet_v2": Application("MobileNetV2", None),
    "efficientnetv2_b0": Application("EfficientNetV2B0", torch_input, NO_PREPROCESSING),
    "efficientnetv2_s": Application("EfficientNetV2S", efficientnetv2_input, NO_PREPROCESSING),
    # pooling="avg": ConvNeXt's head pools, then layer-normalizes (the file's last layer norm).
    "convnext_tiny": Application("ConvNeXtTiny", torch_input, dict(NO_PREPROCESSING, pooling="avg")),
}


def make_imagenet_input(keras):
    """The ImageNetInput layer class of a Keras: x * scale + offset per channel (channels reversed
    first if asked); no variables. The same arithmetic in either Keras (slicing and NumPy
    constants, which TensorFlow and JAX tensors both take).

    Computes in float32 whatever the policy (bfloat16 has ~3 significant digits:
    a 0-255 pixel minus a mean would lose its fractional part).
    """
    class ImageNetInput(keras.layers.Layer):
        def __init__(self, scale, offset, reverse_channels=False, **kwargs):
            super().__init__(dtype="float32", **kwargs)
            self.scale, self.offset, self.reverse_channels = scale, offset, reverse_channels

        def call(self, images):
            if self.reverse_channels:
                images = images[..., ::-1]
            return images * np.asarray(self.scale, np.float32) + np.asarray(self.offset, np.float32)

        def get_config(self):
            return dict(super().get_config(), scale=self.scale, offset=self.offset,
                        reverse_channels=self.reverse_channels)
    return ImageNetInput


ImageNetInput = make_imagenet_input(tf.keras)  # tf.keras's, which hub_backbone.py uses too
KERAS3_IMAGENET_INPUT = {}  # Keras 3's, made on first use (only the JAX engine imports Keras 3)


def imagenet_input_of(keras):
    if keras is tf.keras:
        return ImageNetInput
    if "class" not in KERAS3_IMAGENET_INPUT:
        KERAS3_IMAGENET_INPUT["class"] = make_imagenet_input(keras)
    return KERAS3_IMAGENET_INPUT["class"]


@contextlib.contextmanager
def global_policy(dtype, keras=tf.keras):
    """keras.applications take no dtype: they build under the global mixed-precision policy."""
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(dtype)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(before)


def add_head(features, num_classes, dropout_rate, dtype, keras=tf.keras):
    """[B, H, W, C] or [B, F] features -> [B, num_classes] float32 logits."""
    layers = keras.layers
    if len(features.shape) == 4:
        features = layers.GlobalAveragePooling2D(dtype=dtype, name="pool")(features)
    features = layers.Dropout(dropout_rate, dtype=dtype, name="dropout")(features)
    # float32 logits: softmax and the loss stay accurate under bfloat16.
    return layers.Dense(num_classes, dtype="float32", name="logits")(features)


@contextlib.contextmanager
def float32_normalization(constructor, keras=tf.keras):
    """Builds the Normalization layers of a keras.applications model in float32.

    Under mixed_bfloat16 Keras gives a Normalization layer bfloat16 variables
    (its compute dtype), unlike every other layer: EfficientNet's checkpoints
    would then differ by dtype between use_bfloat16 runs and float32 ones, and a
    float32 checkpoint or weights file could not warm-start a bfloat16 run. The
    layer is pinned to the identity anyway (module docstring), so float32 costs nothing.
    """
    module_layers = getattr(sys.modules[constructor.__module__], "layers", None)
    if not hasattr(module_layers, "Normalization"):  # resnet, mobilenet_v2: none to build
        yield
        return
    normalization = functools.partial(keras.layers.Normalization, dtype="float32")
    with mock.patch.object(module_layers, "Normalization", normalization):
        yield


def build_backbone(name, image_size, dtype, keras=tf.keras):
    """The keras.applications model without its top, renamed BACKBONE; no weights."""
    constructor, options = APPLICATIONS[name].constructor_of(keras), APPLICATIONS[name].options
    smallest = table.NETWORKS[name].min_image_size  # keras.applications refuse smaller without the top
    if image_size < smallest:
        raise ValueError(f"model={name!r} needs image_size >= {smallest}, got {image_size}")
    with global_policy(dtype, keras), float32_normalization(constructor, keras):
        application = constructor(weights=None, include_top=False,
                                   input_shape=(image_size, image_size, 3), **options)
    # The same layers (and variables) under a fixed name, so that model.py and
    # warm_start.py find the backbone whatever keras.applications called it.
    return keras.Model(application.inputs, application.outputs[0], name=BACKBONE)  # one tensor out, in either Keras


def build_application(name, num_classes, image_size, dtype, freeze_backbone, dropout_rate,
                      batch_norm_momentum=None, keras=tf.keras):
    """[B, S, S, 3] images in [-1, 1] -> [B, num_classes] float32 logits.

    freeze_backbone: the backbone's variables are not trained and its batch
    norm runs in inference mode (Keras' rule for trainable=False), the usual
    first phase of a fine-tune. batch_norm_momentum replaces keras.applications'
    own (0.99; MobileNetV2 0.999): read when the layer is called, so setting it
    here acts in every graph model_fn builds and in Keras fit alike (None for
    convnext_tiny, which has none).
    """
    backbone = build_backbone(name, image_size, dtype, keras)
    backbone.trainable = not freeze_backbone
    for layer in backbone.layers:
        if isinstance(layer, keras.layers.BatchNormalization) and batch_norm_momentum is not None:
            layer.momentum = batch_norm_momentum
    images = keras.Input([image_size, image_size, 3], name="images")
    x = images
    convert = APPLICATIONS[name].convert
    if convert:
        scale, offset, reverse = convert()
        x = imagenet_input_of(keras)(scale, offset, reverse, name="imagenet_input")(x)
    logits = add_head(backbone(x), num_classes, dropout_rate, dtype, keras)
    return keras.Model(images, logits, name=name)


def make_builder(name):
    """build(num_classes, image_size, dtype, **options) for nets.BUILDERS (options: the table's)."""
    def build(num_classes, image_size, dtype, freeze_backbone, dropout_rate, batch_norm_momentum=None,
              keras=tf.keras):
        return build_application(name, num_classes, image_size, dtype, freeze_backbone, dropout_rate,
                                 batch_norm_momentum, keras)
    return build


def pin_input_normalization(backbone):
    """Resets every Normalization layer of the backbone to the identity (mean 0, variance 1).

    EfficientNet's: the standardisation is ImageNetInput's job (module docstring).
    """
    for layer in backbone.layers:
        if isinstance(layer, layers.Normalization):
            mean, variance, count = layer.get_weights()
            layer.set_weights([np.zeros_like(mean), np.ones_like(variance), count])


def load_backbone_weights(network, path):
    """Loads a Keras weights file (.h5 / .weights.h5, include_top=False) into the backbone.

    Raises ValueError (Keras' own message) when the file is for another network.
    """
    backbone = network.get_layer(BACKBONE)
    backbone.load_weights(path)
    pin_input_normalization(backbone)
