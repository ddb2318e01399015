"""The training images TensorBoard shows (trainer/run/input_images.py): in their own pixels, named
train_input/image/<i>, made in a graph as the Estimator engine's model_fn makes them and written
eagerly as the JAX engine's loop writes them. Whole runs of each engine:
tests/trainer/test_training_output.py.

    .venv/bin/python -m pytest tests/trainer/test_input_images.py
"""
import numpy as np
import tensorflow as tf

from tests.engines import needs_estimator
from tests.trainer.run_checks import training_images
from trainer.run import input_images


def dark_batch():
    """float32 [4, 6, 6, 3] in [-1, 0]: pixels 0..127, none near white."""
    return np.random.default_rng(3).uniform(-1.0, 0.0, (4, 6, 6, 3)).astype(np.float32)


def own_pixels(batch):
    return np.round((batch[:input_images.SHOWN] + 1.0) * 127.5)


@needs_estimator
def test_the_estimator_engine_shows_a_dark_batch_in_its_own_pixels():
    """A float image summary would stretch each image to white (TF1's image summary op): the
    darkening that brightness and contrast ops did would not show."""
    from trainer.estimator import model
    with tf.Graph().as_default():
        model.add_input_summaries(tf.constant(dark_batch()), tf.constant(0.5), tf.constant(0.1))
        with tf.compat.v1.Session() as session:
            summary = tf.compat.v1.Summary.FromString(session.run(tf.compat.v1.summary.merge_all()))
    shown = {value.tag: tf.io.decode_png(value.image.encoded_image_string).numpy()
             for value in summary.value if value.HasField("image")}
    assert sorted(shown) == ["train_input/image/0", "train_input/image/1", "train_input/image/2"]
    np.testing.assert_allclose(np.stack([shown[tag] for tag in sorted(shown)]), own_pixels(dark_batch()), atol=1)


def test_written_eagerly_as_the_jax_loop_writes_them(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    input_images.write_images(writer, dark_batch(), 12)
    input_images.write_images(writer, dark_batch()[:2], 14)  # a batch of 2 shows 2
    writer.flush()
    images = training_images(tmp_path)
    assert sorted(images) == [12, 14] and images[14].shape == (2, 6, 6, 3)
    np.testing.assert_allclose(images[12], own_pixels(dark_batch()), atol=1)
