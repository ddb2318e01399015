"""TPU readiness: the training step compiles under XLA; a dynamic-shaped model is rejected clearly.

    .venv/bin/python -m pytest tests/trainer/test_xla_check.py
"""
import pytest
import tensorflow as tf

from trainer import nets, xla_check


@pytest.mark.parametrize("overrides", [
    {"model": "small_cnn"},
    {"model": "resnet", "resnet_depth": 8, "resnet_width": 4, "transpose_input": True},
    {"model": "small_cnn", "use_bfloat16": True, "optimizer": "momentum"},
], ids=["small_cnn", "resnet_transposed", "small_cnn_bfloat16_momentum"])
def test_train_step_compiles_and_runs_under_xla(tiny_params, overrides):
    losses = xla_check.check_train_step(dict(tiny_params, **overrides), batch_size=4, steps=2)
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


def build_dynamic_cnn(num_classes, image_size, dtype, keep_threshold):
    """Keeps only the images whose mean is above a threshold: a data-dependent batch size."""
    images = tf.keras.Input([image_size, image_size, 3], name="images")
    kept = tf.keras.layers.Lambda(
        lambda x: tf.boolean_mask(x, tf.reduce_mean(x, axis=[1, 2, 3]) > keep_threshold),
        name="keep_bright")(images)
    pooled = tf.keras.layers.GlobalAveragePooling2D(name="pool")(kept)
    logits = tf.keras.layers.Dense(num_classes, name="logits")(pooled)
    return tf.keras.Model(images, tf.keras.layers.Lambda(
        lambda t: tf.pad(t, [[0, 4 - tf.shape(t)[0]], [0, 0]]), name="pad_back")(logits))


def test_dynamic_shaped_model_fails_with_the_op_named(tiny_params, monkeypatch):
    monkeypatch.setitem(nets.NETWORKS, "dynamic_cnn", (
        lambda num_classes, image_size, dtype, **_: build_dynamic_cnn(num_classes, image_size, dtype, 0.0),
        ()))
    with pytest.raises(xla_check.XlaCheckError,
                       match=r"model='dynamic_cnn': the training step has \d+ tensor\(s\) without a "
                             r"static shape.*keep_bright/boolean_mask"):
        xla_check.check_train_step(dict(tiny_params, model="dynamic_cnn"), batch_size=4)


def test_an_op_xla_cannot_compile_fails_with_xla_message(tiny_params, monkeypatch):
    def build_string_cnn(num_classes, image_size, dtype, **_):
        images = tf.keras.Input([image_size, image_size, 3], name="images")
        # Formats every pixel as text and back: static shapes, but no XLA kernel.
        roundtrip = tf.keras.layers.Lambda(
            lambda x: tf.strings.to_number(tf.strings.as_string(x)), name="as_text")(images)
        pooled = tf.keras.layers.GlobalAveragePooling2D(name="pool")(roundtrip)
        return tf.keras.Model(images, tf.keras.layers.Dense(num_classes, name="logits")(pooled))
    monkeypatch.setitem(nets.NETWORKS, "string_cnn", (build_string_cnn, ()))
    with pytest.raises(xla_check.XlaCheckError,
                       match=r"model='string_cnn': XLA cannot compile the training step: .*AsString"):
        xla_check.check_train_step(dict(tiny_params, model="string_cnn"), batch_size=4)
