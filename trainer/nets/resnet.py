"""A ResNet v2 (pre-activation, He et al. 2016) for small images, built in code.

Depth 6n+2: a 3x3 stem, three stages of n basic blocks with width, 2*width and
4*width filters (stride 2 between stages), then BN/ReLU, global average pooling
and the classifier. No downloaded weights.

Built with either Keras: tf.keras (Keras 2, the Estimator and Keras engines) or Keras 3
(the JAX engine), the same layers in the same order, so weights move between them.

    .venv/bin/python -c "from trainer.nets import resnet; resnet.build_resnet(10, 32, 'float32', 20, 16).summary()"
"""
import tensorflow as tf


def conv(filters, strides, name, dtype, layers):
    # He init, no bias (BN follows); the reference ResNet's choices.
    return layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False,
                         kernel_initializer="he_normal", dtype=dtype, name=name)


def bn_relu(x, name, dtype, layers):
    x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5, dtype=dtype, name=f"{name}_bn")(x)
    return layers.ReLU(dtype=dtype, name=f"{name}_relu")(x)


def residual_block(x, filters, strides, name, dtype, layers):
    """Pre-activation basic block; a 1x1 projection when the shape changes."""
    preact = bn_relu(x, f"{name}_pre", dtype, layers)
    shortcut = x
    if strides != 1 or x.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=strides, use_bias=False, dtype=dtype,
                                 name=f"{name}_proj")(preact)
    y = conv(filters, strides, f"{name}_conv1", dtype, layers)(preact)
    y = bn_relu(y, f"{name}_mid", dtype, layers)
    y = conv(filters, 1, f"{name}_conv2", dtype, layers)(y)
    return layers.Add(dtype=dtype, name=f"{name}_add")([shortcut, y])


def build_resnet(num_classes, image_size, dtype, resnet_depth, resnet_width, keras=tf.keras):
    """[B, S, S, 3] -> [B, num_classes] float32 logits, a model of keras (tf.keras or Keras 3)."""
    layers = keras.layers
    if (resnet_depth - 2) % 6 or resnet_depth < 8:
        raise ValueError(f"resnet_depth={resnet_depth} must be 6n+2 with n >= 1")
    blocks_per_stage = (resnet_depth - 2) // 6
    images = keras.Input([image_size, image_size, 3], name="images")
    x = conv(resnet_width, 1, "stem_conv", dtype, layers)(images)
    for stage in range(3):
        for block in range(blocks_per_stage):
            strides = 2 if stage > 0 and block == 0 else 1
            x = residual_block(x, resnet_width * 2 ** stage, strides,
                               f"stage{stage}_block{block}", dtype, layers)
    x = bn_relu(x, "final", dtype, layers)
    x = layers.GlobalAveragePooling2D(dtype=dtype, name="pool")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name=f"resnet{resnet_depth}")
