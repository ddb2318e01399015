"""`python -m trainer.data.augment IMAGE POLICY`: a look at what --augment does to one photo.

    .venv/bin/python -m pytest tests/trainer/test_augment_command.py
"""
import pytest
import tensorflow as tf

from tests.user_commands import error_lines, run, user_env

pytestmark = pytest.mark.process


def test_without_arguments_it_names_what_it_needs_not_a_traceback():
    done = run("trainer.data.augment", timeout=120, env=user_env(without_tensorflow=True))  # answered before TF loads
    assert done.returncode == 2 and done.stdout == ""
    assert error_lines(done) == ["error: the following arguments are required: image, policy; "
                                 "see python -m trainer.data.augment --help"]


def test_a_missing_image_is_one_line(tmp_path):
    done = run("trainer.data.augment", tmp_path / "nope.jpg", "randaugment", timeout=120,
               env=user_env(without_tensorflow=True))  # a local path is judged before TensorFlow loads
    assert done.returncode == 2 and done.stdout == ""
    assert error_lines(done) == [f"error: {tmp_path}/nope.jpg does not exist; pass an image file"]


def test_a_photo_goes_through_the_policy_and_is_written_beside_it(tmp_path, make_jpeg):
    photo = tmp_path / "cat.jpg"
    photo.write_bytes(make_jpeg(48, 64, seed=3))
    done = run("trainer.data.augment", photo, "randaugment", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == f"wrote {tmp_path}/cat.augmented.png\n"
    written = tf.io.decode_png(tf.io.read_file(str(tmp_path / "cat.augmented.png")))
    assert written.shape == (48, 64, 3)
