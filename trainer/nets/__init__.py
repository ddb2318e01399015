"""The architectures, as Keras models that map images to logits.

model_fn calls them in graph mode (TPUEstimator); bench/ fits the same models
with Keras. Each builder takes (num_classes, image_size, dtype, **options),
where options are params keys; every option is passed explicitly (trainer/settings/table.py
holds the defaults, and network_options picks a network's from params).

small_cnn and resnet (CIFAR-style) are built in code for small images;
resnet50, efficientnet_b0, mobilenet_v2, efficientnetv2_b0, efficientnetv2_s and
convnext_tiny are keras.applications backbones
(nets/applications.py) and hub a TF Hub feature vector (nets/hub_backbone.py),
each with a fresh classifier head and a layer named BACKBONE that warm start,
--freeze_backbone and --backbone_learning_rate_multiplier act on.

    .venv/bin/python -c "from trainer import nets; from trainer.settings import table; nets.build_network('resnet', 10, 32, **nets.network_options('resnet', table.DEFAULTS)).summary()"
"""
import contextlib
import warnings

import tensorflow as tf

from trainer.nets import applications, hub_backbone, resnet, small_cnn
from trainer.settings import table

BACKBONE = applications.BACKBONE

# name -> builder; which settings each reads, whether it has a backbone and its smallest
# image are the settings table's (trainer/settings/table.py NETWORKS), so --help and the
# checks know them without importing TensorFlow.
BUILDERS = {
    "small_cnn": small_cnn.build_small_cnn,
    "resnet": resnet.build_resnet,
    **{name: applications.make_builder(name) for name in applications.APPLICATIONS},
    "hub": hub_backbone.build_hub_network,
}


def network_options(name, params):
    """The params a network reads, e.g. {"resnet_depth": 20, "resnet_width": 16}."""
    return {key: params[key] for key in table.NETWORKS[name].options}


def has_backbone(name):
    """True for the networks built around a (pre-trainable) backbone layer."""
    return table.NETWORKS[name].has_backbone


def build_network(name, num_classes, image_size, use_bfloat16=False, keras=None, **options):
    """Returns an uncompiled Keras model: [B, S, S, 3] images -> [B, num_classes] float32 logits.

    options: exactly the params keys this network reads (network_options). With
    use_bfloat16 the layers compute in bfloat16 (Keras "mixed_bfloat16":
    float32 variables) and the logits are still float32. keras: tf.keras (None) or Keras 3
    for the networks the table marks keras3 (the JAX engine's), with the same layers.
    """
    if name not in BUILDERS:
        raise ValueError(f"model={name!r} is not one of {sorted(BUILDERS)}")
    builder, keys = BUILDERS[name], table.NETWORKS[name].options
    if set(options) != set(keys):
        raise ValueError(f"model={name!r} takes options {list(keys)}, got {sorted(options)}")
    dtype = "mixed_bfloat16" if use_bfloat16 else "float32"
    if keras is None or keras is tf.keras:
        return builder(num_classes=num_classes, image_size=image_size, dtype=dtype, **options)
    if not table.NETWORKS[name].keras3:
        raise ValueError(f"model={name!r} is built with tf.keras only, not Keras 3")
    return builder(num_classes=num_classes, image_size=image_size, dtype=dtype, keras=keras, **options)


def build_from_params(params, keras=None):
    """The network params describe (model, num_classes, image_size, use_bfloat16, options):
    the one model_fn trains, warm start checks and bench/ fits; keras: as build_network's."""
    return build_network(params["model"], params["num_classes"], params["image_size"],
                         use_bfloat16=params["use_bfloat16"], keras=keras,
                         **network_options(params["model"], params))


@contextlib.contextmanager
def fixed_learning_phase():
    """Builds a Keras functional model in graph mode without a cond per layer.

    In graph mode Keras traces the functional model on a symbolic learning phase,
    building both branches of every batch-norm and dropout layer, which roughly triples
    the build time of the deeper networks (docs/benchmarks.md#training). That trace is
    never run: model_fn calls the network with training given explicitly. (Keras
    deprecates the scope, hence its warning is silenced.)
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*learning_phase_scope.* is deprecated")
        with tf.keras.backend.learning_phase_scope(0):
            yield


def backbone_of(network):
    """The network's BACKBONE layer, or None (small_cnn, resnet)."""
    names = {layer.name for layer in network.layers}
    return network.get_layer(BACKBONE) if BACKBONE in names else None


def load_backbone_weights(network, path):
    """Loads a Keras weights file into a keras.applications network's backbone (applications.py)."""
    return applications.load_backbone_weights(network, path)
