"""The architectures, as Keras models that map images to logits.

model_fn calls them in graph mode (TPUEstimator); bench/ fits the same models
with Keras. Each builder takes (num_classes, image_size, dtype, **options),
where options are params keys (trainer/config.py holds their defaults).

    .venv/bin/python -c "from trainer import nets; nets.build_network('resnet', 10, 32).summary()"
"""
from trainer import config
from trainer.nets import resnet, small_cnn

# name -> (builder, the params keys it reads)
NETWORKS = {
    "small_cnn": (small_cnn.build_small_cnn, ("cnn_filters", "dense_units", "dropout_rate")),
    "resnet": (resnet.build_resnet, ("resnet_depth", "resnet_width")),
}


def network_options(name, params):
    """The params a network reads, e.g. {"resnet_depth": 20, "resnet_width": 16}."""
    return {key: params[key] for key in NETWORKS[name][1]}


def build_network(name, num_classes, image_size, use_bfloat16=False, **options):
    """Returns an uncompiled tf.keras.Model: [B, S, S, 3] images -> [B, num_classes] float32 logits.

    options override trainer/config.py's defaults for this network. With
    use_bfloat16 the layers compute in bfloat16 (Keras "mixed_bfloat16":
    float32 variables) and the logits are still float32.
    """
    if name not in NETWORKS:
        raise ValueError(f"model={name!r} is not one of {sorted(NETWORKS)}")
    builder, keys = NETWORKS[name]
    unknown = sorted(set(options) - set(keys))
    if unknown:
        raise ValueError(f"model={name!r} takes options {list(keys)}, not {unknown}")
    resolved = {key: options.get(key, config.DEFAULTS[key]) for key in keys}
    dtype = "mixed_bfloat16" if use_bfloat16 else "float32"
    return builder(num_classes=num_classes, image_size=image_size, dtype=dtype, **resolved)
