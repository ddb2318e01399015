"""The small CNN of the "custom Estimator for Cloud TPU" flowers sample, in Keras.

Conv/BN/ReLU/max-pool blocks, then a dense layer, dropout and the classifier.
Every layer is named, so checkpoints restore by name in every graph model_fn builds.

Built with either Keras: tf.keras (Keras 2, the Estimator and Keras engines) or Keras 3
(the JAX engine), the same layers in the same order, so weights move between them.

    .venv/bin/python -c "from trainer.nets import small_cnn; small_cnn.build_small_cnn(10, 32, 'float32', [32, 64], 128, 0.3).summary()"
"""
import tensorflow as tf


def conv_block(x, filters, index, dtype, layers):
    """3x3 conv (no bias: BN follows), batch norm, ReLU, 2x2 max pool: halves H and W."""
    x = layers.Conv2D(filters, 3, padding="same", use_bias=False, dtype=dtype,
                      name=f"conv{index}")(x)
    x = layers.BatchNormalization(dtype=dtype, name=f"bn{index}")(x)
    x = layers.ReLU(dtype=dtype, name=f"relu{index}")(x)
    return layers.MaxPool2D(2, dtype=dtype, name=f"pool{index}")(x)


def build_small_cnn(num_classes, image_size, dtype, cnn_filters, dense_units, dropout_rate,
                    keras=tf.keras):
    """[B, S, S, 3] -> [B, num_classes] float32 logits, a model of keras (tf.keras or Keras 3)."""
    layers = keras.layers
    if image_size < 2 ** len(cnn_filters):
        raise ValueError(f"image_size={image_size} is too small for {len(cnn_filters)} "
                         f"pooling blocks (cnn_filters={cnn_filters})")
    images = keras.Input([image_size, image_size, 3], name="images")
    x = images
    for index, filters in enumerate(cnn_filters):
        x = conv_block(x, filters, index, dtype, layers)
    x = layers.Flatten(dtype=dtype, name="flatten")(x)
    x = layers.Dense(dense_units, activation="relu", dtype=dtype, name="dense")(x)
    x = layers.Dropout(dropout_rate, dtype=dtype, name="dropout")(x)
    # float32 logits: softmax and the loss stay accurate under bfloat16.
    logits = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name="small_cnn")
