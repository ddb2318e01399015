"""A TF Hub image feature vector as the backbone (--model hub --hub_module PATH).

PATH is a TF2 SavedModel in TF Hub's reusable format (e.g. an EfficientNet
feature vector the user downloaded and unpacked): images [B, S, S, 3] in [0, 1]
(TF Hub's convention for image modules) -> features [B, F]. It is loaded with
hub.KerasLayer, trained unless freeze_backbone, and topped with this
project's head (dropout + float32 "logits"). Images arrive in [-1, 1]
(common/image_ops.py), so an ImageNetInput layer maps them to [0, 1].

The load options make the process that builds the graph read the module
(experimental_io_device="/job:localhost"), as the Cloud TPU guides set it for
hub.KerasLayer: by default a remote TPU worker would open the path itself, and a
path on this machine's disk does not exist there.

TF Hub's TF2 image modules with batch norm (EfficientNet V2, BiT, ...) take a
`batch_norm_momentum` argument in their __call__; with Keras' own 0.99 a short
fine-tune evaluates at chance (eval's moving statistics barely move), so
--batch_norm_momentum is passed to a module that takes it, and one line says so when
a module does not.

    .venv/bin/python -c "from trainer import nets; nets.build_network('hub', 5, 224, hub_module='MODULE_DIR', freeze_backbone=True, dropout_rate=0.2, batch_norm_momentum=0.9).summary()"
"""
import functools
import inspect
import logging
import warnings

import tensorflow as tf

from trainer.nets.applications import BACKBONE, ImageNetInput, add_head  # not via trainer.nets: no cycle


def import_hub():
    """tensorflow_hub, imported only when a hub network is built (it also needs tf-keras).

    Its import warns that pkg_resources is deprecated (tensorflow_hub 0.16's own
    version check): nothing a user of this trainer can act on, so it is silenced.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
        import tensorflow_hub as hub
    return hub


def build_hub_network(num_classes, image_size, dtype, hub_module, freeze_backbone, dropout_rate,
                      batch_norm_momentum):
    """[B, S, S, 3] images in [-1, 1] -> [B, num_classes] float32 logits."""
    if not hub_module:
        raise ValueError("model='hub' needs hub_module (a TF2 SavedModel image feature vector)")
    hub = import_hub()
    module = hub.load(hub_module, options=tf.saved_model.LoadOptions(experimental_io_device="/job:localhost"))
    # float32: the module's saved functions take the dtype they were traced with;
    # under use_bfloat16 only the head computes in bfloat16.
    backbone = hub.KerasLayer(module, trainable=not freeze_backbone, dtype="float32", name=BACKBONE,
                              arguments=momentum_argument(module, hub_module, batch_norm_momentum))
    images = tf.keras.Input([image_size, image_size, 3], name="images")
    x = ImageNetInput(0.5, 0.5, name="unit_range_input")(images)  # [-1, 1] -> [0, 1]
    features = backbone(x)
    if features.shape.rank != 2:
        raise ValueError(f"hub_module={hub_module!r} returns shape {features.shape}; "
                         f"expected an image feature vector [batch, features]")
    logits = add_head(features, num_classes, dropout_rate, dtype)
    return tf.keras.Model(images, logits, name="hub")


def momentum_argument(module, hub_module, batch_norm_momentum):
    """{"batch_norm_momentum": value} for a module whose __call__ takes it; else {} and one line."""
    if "batch_norm_momentum" in inspect.signature(module.__call__).parameters:
        return {"batch_norm_momentum": batch_norm_momentum}
    say_momentum_not_taken(str(hub_module), batch_norm_momentum)
    return {}


@functools.lru_cache(maxsize=None)  # once per module and value: model_fn builds the network per mode
def say_momentum_not_taken(hub_module, batch_norm_momentum):
    logging.getLogger(__name__).warning(
        "hub_module=%r takes no batch_norm_momentum argument: --batch_norm_momentum=%s is not "
        "applied (its batch norm, if any, keeps the momentum it was saved with)",
        hub_module, batch_norm_momentum)
