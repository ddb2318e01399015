"""What the fine-tuning tests make themselves: a TF Hub feature-vector module and Keras weights files.

Nothing is downloaded: the module and the weights files have the formats of the
real ones (TF Hub's TF2 SavedModel, keras.applications' include_top=False
weights), with small or random values.
"""
import numpy as np
import tensorflow as tf

HUB_FEATURES = 6  # width of the tiny module's feature vector


def write_hub_module(path, seed=0):
    """Saves a tiny image feature vector in TF Hub's TF2 format: [B, S, S, 3] in [0, 1] -> [B, 6].

    A Keras model saved with tf.saved_model.save is a reusable SavedModel
    (__call__ with a training argument, variables, trainable_variables): what
    hub.KerasLayer loads. Batch norm inside, so training mode is exercised.
    """
    tf.keras.utils.set_random_seed(seed)
    images = tf.keras.Input([None, None, 3], name="images")
    x = tf.keras.layers.Conv2D(HUB_FEATURES, 3, strides=2, name="hub_conv")(images)
    x = tf.keras.layers.BatchNormalization(name="hub_bn")(x)
    x = tf.keras.layers.ReLU(name="hub_relu")(x)
    features = tf.keras.layers.GlobalAveragePooling2D(name="hub_pool")(x)
    module = tf.keras.Model(images, features, name="tiny_feature_vector")
    tf.saved_model.save(module, str(path))
    return {variable.name: variable.numpy() for variable in module.variables}


def write_momentum_hub_module(path):
    """Saves a TF Hub-style image feature vector whose __call__ takes batch_norm_momentum, as TF
    Hub's TF2 EfficientNet V2 and BiT modules do: [B, S, S, 3] -> [B, HUB_FEATURES]. Training
    updates its moving mean with that momentum. TF Hub's reusable format: `variables` and
    `trainable_variables` attributes on the root object."""
    moving_mean = tf.Variable(tf.zeros([3]), trainable=False, name="moving_mean")
    kernel = tf.Variable(tf.ones([3, HUB_FEATURES]), name="kernel")

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32),
                                  tf.TensorSpec([], tf.bool), tf.TensorSpec([], tf.float32)])
    def call(images, training=False, batch_norm_momentum=0.99):
        batch_mean = tf.reduce_mean(images, [0, 1, 2])

        def update():
            moving_mean.assign(batch_norm_momentum * moving_mean + (1 - batch_norm_momentum) * batch_mean)
            return batch_mean
        mean = tf.cond(training, update, lambda: tf.identity(moving_mean))
        return tf.matmul(tf.reduce_mean(images, [1, 2]) - mean, kernel)

    root = tf.train.Checkpoint()  # an AutoTrackable root takes plain attributes
    root.variables, root.trainable_variables = [moving_mean, kernel], [kernel]
    root.__call__ = call
    tf.saved_model.save(root, str(path))


def write_backbone_weights(name, image_size, path, seed=0):
    """Saves random keras.applications `name` weights (include_top=False) to path, as
    `model.save_weights` writes them (.h5: legacy HDF5; .weights.h5: Keras 3 style).
    Returns the weights in layer order."""
    from trainer.nets import applications
    tf.keras.backend.clear_session()  # layer names as in a fresh process
    tf.keras.utils.set_random_seed(seed)
    constructor = applications.APPLICATIONS[name].constructor_of()
    backbone = constructor(weights=None, include_top=False, input_shape=(image_size, image_size, 3))
    # Moving statistics away from their 0/1 initial values, so that copying them is visible.
    for layer in backbone.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            mean, variance = layer.moving_mean, layer.moving_variance
            mean.assign(np.random.default_rng(seed).uniform(-1, 1, mean.shape))
            variance.assign(np.random.default_rng(seed + 1).uniform(0.5, 2, variance.shape))
    backbone.save_weights(str(path))
    return {variable.name: variable.numpy() for variable in backbone.variables}
