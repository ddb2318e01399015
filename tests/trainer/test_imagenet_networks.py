"""The photo networks end to end: train on JPEG records, evaluate, export a CPU-servable SavedModel.

mobilenet_v2, the cheapest of the three keras.applications networks (all three
compile and run under XLA in test_xla_check.py), at its smallest input (32 px, from
larger JPEGs: what is checked is the nested backbone's updates, the averaged
weights and the export's own resizing, none of which depends on the size; at 224 px
the same test took 56 s on 2 busy cores), with the reference's training knobs on, in
mode train (no evaluation graph: it costs as much as the steps here); and a TF Hub
backbone the test exports itself.

    .venv/bin/python -m pytest tests/trainer/test_imagenet_networks.py
"""
import numpy as np
import pytest
import tensorflow as tf

from common import signature
from tests.conftest import encode_image, pattern_image
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.fine_tune_helpers import write_hub_module, write_momentum_hub_module
from trainer import nets
from trainer import chain
from trainer.estimator import engine as estimator_engine


def train_and_export(data, out, *booleans, **flags):
    """Runs the loop to its final export; returns (params, export dir)."""
    params = chain.parse_params(as_argv(dict(
        TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
        output_dir=out, **flags)) + [f"--{flag}" for flag in booleans])
    return params, estimator_engine.run(params)


def serve(export_dir, jpegs):
    """The export's serving_default probabilities for a list of JPEG bytes."""
    loaded = tf.saved_model.load(export_dir, tags=["serve"])
    outputs = loaded.signatures[signature.SIGNATURE_DEFAULT](
        **{signature.INPUT_IMAGE_BYTES: tf.constant(jpegs)})
    return outputs[signature.OUTPUT_PROBABILITIES].numpy()


@pytest.mark.trains
def test_mobilenet_v2_trains_on_jpegs_and_exports_its_averaged_weights(write_tfrecord_dataset, tmp_path):
    data = write_tfrecord_dataset({"train": 4, "eval": 3}, labels=("a", "b", "c"), size=48)
    params, export_dir = train_and_export(
        data, tmp_path / "out", mode="train", model="mobilenet_v2", image_size=32, train_batch_size=2,
        eval_batch_size=2, train_steps=2, steps_per_eval=2, save_checkpoints_steps=2,
        num_warmup_images=1, moving_average_decay=0.9, label_smoothing=0.1, lr_schedule="step",
        backbone_learning_rate_multiplier=0.1)
    assert export_dir.endswith("/export/image_classifier/2")
    checkpoint = tf.train.latest_checkpoint(params["output_dir"])
    # The nested backbone's batch norm was updated by training (model_fn runs its updates).
    assert np.abs(tf.train.load_variable(checkpoint, "bn_Conv1/moving_mean")).max() > 0
    # The export holds the moving average, not the last raw weights.
    average = tf.train.load_variable(checkpoint, "logits/kernel/ExponentialMovingAverage")
    raw = tf.train.load_variable(checkpoint, "logits/kernel")
    exported = tf.train.load_variable(f"{export_dir}/variables/variables",
                                      "logits/kernel/ExponentialMovingAverage")
    np.testing.assert_array_equal(exported, average)
    assert np.abs(raw - average).max() > 0
    jpegs = [encode_image(pattern_image(224, 224, seed=9)), encode_image(pattern_image(300, 200, seed=3))]
    probabilities = serve(export_dir, jpegs)
    assert probabilities.shape == (2, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.trains
def test_hub_backbone_trains_and_exports_with_bfloat16_and_transposed_input(
        write_tfrecord_dataset, tmp_path):
    data = write_tfrecord_dataset({"train": 16, "eval": 5}, labels=("a", "b"), size=20)
    module_values = write_hub_module(tmp_path / "module")
    params, export_dir = train_and_export(data, tmp_path / "out", "use_bfloat16", "transpose_input",
                                          model="hub", hub_module=tmp_path / "module",
                                          dropout_rate=0.1)
    assert params["use_bfloat16"] and params["transpose_input"]
    probabilities = serve(export_dir, [encode_image(pattern_image(20, 20, seed=1))])
    assert probabilities.shape == (1, 2)
    assert probabilities.sum() == pytest.approx(1.0, rel=1e-5)
    checkpoint = tf.train.latest_checkpoint(params["output_dir"])
    assert tf.train.load_variable(checkpoint, "global_step") == 4
    trained = tf.train.load_variable(checkpoint, "hub_conv/kernel")  # the module's, fine-tuned
    assert trained.shape == (3, 3, 3, 6)
    assert 0 < np.abs(trained - module_values["hub_conv/kernel:0"]).max() < 0.1


def test_a_hub_module_that_takes_batch_norm_momentum_gets_the_setting(tmp_path, caplog):
    """One training call on images of mean 0.5 ([-1, 1] inputs of 0, mapped to [0, 1]) moves the
    module's moving mean from 0 to (1 - momentum) * 0.5: 0.25 with momentum 0.5, not 0.005."""
    write_momentum_hub_module(tmp_path / "momentum_module")
    network = nets.build_network("hub", 3, 16, hub_module=str(tmp_path / "momentum_module"),
                                 freeze_backbone=False, dropout_rate=0.0, batch_norm_momentum=0.5)
    network(tf.zeros([2, 16, 16, 3]), training=True)
    moving_mean = next(v for v in network.variables if "moving_mean" in v.name)
    np.testing.assert_allclose(moving_mean.numpy(), [0.25] * 3, rtol=1e-6)
    assert "takes no batch_norm_momentum" not in caplog.text


def test_a_hub_module_without_the_argument_is_said_in_one_line(tmp_path, caplog):
    write_hub_module(tmp_path / "module")
    nets.build_network("hub", 3, 16, hub_module=str(tmp_path / "module"), freeze_backbone=False,
                       dropout_rate=0.0, batch_norm_momentum=0.7)
    lines = [r.getMessage() for r in caplog.records if "takes no batch_norm_momentum" in r.getMessage()]
    assert lines == [f"hub_module={str(tmp_path / 'module')!r} takes no batch_norm_momentum argument: "
                     f"--batch_norm_momentum=0.7 is not applied (its batch norm, if any, keeps the "
                     f"momentum it was saved with)"]
