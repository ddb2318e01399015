"""TPU readiness: each engine's training step compiles under XLA; a dynamic-shaped model is rejected clearly.

    .venv/bin/python -m pytest tests/trainer/test_xla_check.py
"""
# The check needs to know the step compiles, not to make fast code: tests/conftest.py compiles
# without LLVM's optimisation passes (MobileNetV2's step in ~4 s instead of ~49 s).
import pytest
import tensorflow as tf

from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.fine_tune_helpers import write_hub_module
from trainer import chain, nets
from trainer.settings import table
from tests.engines import needs_estimator
from trainer.cloud.xla import XlaCheckError
from trainer.keras import xla_check as keras_xla_check


def check_train_step(engine, params, **kwargs):
    """The engine's check; the Estimator's imported only here (.venv-keras has no tf.estimator)."""
    if engine == "keras":
        return keras_xla_check.check_train_step(params, **kwargs)
    from trainer.estimator import xla_check
    return xla_check.check_train_step(params, **kwargs)


def on_estimator(*values):
    return pytest.param(*values, marks=needs_estimator)


@pytest.fixture(scope="module")
def tiny_params(tmp_path_factory):
    """tests/trainer/conftest.py's tiny_params, made once: the checks build their own batches
    (trainer/cloud/xla.py's make_batch) and each test changes a copy."""
    root = tmp_path_factory.mktemp("xla")
    data = write_dataset(root / "data", {"train": 24, "eval": 11}, size=20)
    return chain.parse_params(as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*",
                                           eval_data_path=f"{data}/eval-*", output_dir=root / "out")))

# The reference's training knobs together: each must stay inside the compiled step.
KNOBS = {"label_smoothing": 0.1, "moving_average_decay": 0.99, "lr_schedule": "step"}
# Every augmentation on: the step then takes mixup/CutMix's float32 [B, C] label shares.
AUGMENTED = {"augment": "randaugment", "random_erasing": 0.25, "mixup_alpha": 0.8, "cutmix_alpha": 1.0,
             "label_smoothing": 0.1}
# The optimizer step's own work (trainer/estimator/optimizer.py, trainer/keras/model.py).
ADAMW_CLIPPED = {"optimizer": "adamw", "weight_decay": 0.05, "gradient_clip_norm": 1.0}


@pytest.mark.parametrize("engine, overrides", [
    on_estimator("estimator", {"model": "small_cnn"}),
    on_estimator("estimator", {"model": "resnet", "resnet_depth": 8, "resnet_width": 4,
                               "transpose_input": True}),
    on_estimator("estimator", {"model": "small_cnn", "use_bfloat16": True, "optimizer": "momentum", **KNOBS}),
    ("keras", {"model": "resnet", "resnet_depth": 8, "resnet_width": 4}),
    ("keras", {"model": "small_cnn", "use_bfloat16": True, "optimizer": "momentum", **KNOBS}),
    on_estimator("estimator", {"model": "small_cnn", "transpose_input": True, **AUGMENTED}),
    ("keras", {"model": "small_cnn", **AUGMENTED}),
    on_estimator("estimator", {"model": "small_cnn", **ADAMW_CLIPPED}),
    ("keras", {"model": "small_cnn", **ADAMW_CLIPPED}),
], ids=["small_cnn", "resnet_transposed", "small_cnn_bfloat16_momentum_knobs", "keras_resnet",
        "keras_small_cnn_bfloat16_momentum_knobs", "small_cnn_augmented", "keras_small_cnn_augmented",
        "small_cnn_adamw_clipped", "keras_small_cnn_adamw_clipped"])
def test_train_step_compiles_and_runs_under_xla(tiny_params, engine, overrides):
    losses = check_train_step(engine, dict(tiny_params, **overrides), batch_size=4, steps=2)
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


def test_the_keras_step_with_a_backbone_compiles_under_xla(tiny_params, tmp_path):
    """Two optimizers (--backbone_learning_rate_multiplier) and the averages, in one compiled step."""
    write_hub_module(tmp_path / "module")
    params = dict(tiny_params, model="hub", hub_module=str(tmp_path / "module"), freeze_backbone=False,
                  backbone_learning_rate_multiplier=0.1, **KNOBS)
    losses = check_train_step("keras", params, batch_size=2, steps=2)
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


# The ImageNet networks at their smallest size (32 px: XLA's work is the graph, not
# the pixels), one compiled step each, each in bfloat16 (what a TPU runs them in);
# transposed input is the network's business only through model_fn, checked once.
@pytest.mark.trains  # a training step of each full-size network: 20-35 s each on 2 cores
@pytest.mark.parametrize("overrides", [
    {"model": "resnet50", "use_bfloat16": True, "transpose_input": True},
    {"model": "efficientnet_b0", "use_bfloat16": True},
    {"model": "mobilenet_v2", "use_bfloat16": True, "backbone_learning_rate_multiplier": 0.1,
     **KNOBS},
], ids=["resnet50_bfloat16_transposed", "efficientnet_b0_bfloat16", "mobilenet_v2_bfloat16_knobs"])
@needs_estimator
def test_imagenet_networks_compile_and_run_under_xla(tiny_params, overrides):
    params = dict(tiny_params, image_size=32, dropout_rate=0.2, **overrides)
    losses = check_train_step("estimator", params, batch_size=2, steps=1)
    assert len(losses) == 1 and losses[0] > 0


@needs_estimator
def test_hub_backbone_passes_the_check_and_trains_under_xla(tiny_params, tmp_path):
    """A SavedModel's function keeps the shapes it was traced with ([None, ...]) on its call
    op's outputs; XLA compiles the call from the static inputs, and the check skips them."""
    write_hub_module(tmp_path / "module")
    params = dict(tiny_params, model="hub", hub_module=str(tmp_path / "module"))
    losses = check_train_step("estimator", dict(params, freeze_backbone=False), batch_size=2, steps=2)
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


@pytest.mark.parametrize("engine", [on_estimator("estimator"), "keras"])
def test_dynamic_shaped_model_fails_with_the_op_named(tiny_params, monkeypatch, engine):
    monkeypatch.setitem(table.NETWORKS, "dynamic_cnn", table.Network(()))
    monkeypatch.setitem(nets.BUILDERS, "dynamic_cnn",
                        lambda num_classes, image_size, dtype, **_: build_dynamic_cnn(
                            num_classes, image_size, dtype, 0.0))
    with pytest.raises(XlaCheckError,
                       match=r"model='dynamic_cnn': the training step has \d+ tensor\(s\) without a "
                             r"static shape.*keep_bright/boolean_mask"):
        check_train_step(engine, dict(tiny_params, model="dynamic_cnn"), batch_size=4)


@pytest.mark.parametrize("engine", [on_estimator("estimator"), "keras"])
def test_an_op_xla_cannot_compile_fails_with_xla_message(tiny_params, monkeypatch, engine):
    def build_string_cnn(num_classes, image_size, dtype, **_):
        images = tf.keras.Input([image_size, image_size, 3], name="images")
        # Formats every pixel as text and back: static shapes, but no XLA kernel.
        roundtrip = tf.keras.layers.Lambda(
            lambda x: tf.strings.to_number(tf.strings.as_string(x)), name="as_text")(images)
        pooled = tf.keras.layers.GlobalAveragePooling2D(name="pool")(roundtrip)
        return tf.keras.Model(images, tf.keras.layers.Dense(num_classes, name="logits")(pooled))
    monkeypatch.setitem(table.NETWORKS, "string_cnn", table.Network(()))
    monkeypatch.setitem(nets.BUILDERS, "string_cnn", build_string_cnn)
    with pytest.raises(XlaCheckError,
                       match=r"model='string_cnn': XLA cannot compile the training step: .*AsString"):
        check_train_step(engine, dict(tiny_params, model="string_cnn"), batch_size=4)
