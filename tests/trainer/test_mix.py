"""Mixup and CutMix (trainer/data/mix.py), their soft labels in the loss, and the training input with
every augmentation on (static shapes, soft labels, evaluation untouched).

As in the reference (tensorflow/models' MixupAndCutmix): image i is mixed with image B-1-i,
and its label keeps the share lambda of its own class; here lambda is also exactly the share
of pixels a CutMix image keeps (the box clipped at the edges, timm's correct_lam).

    .venv/bin/python -m pytest tests/trainer/test_mix.py
"""
import numpy as np
import pytest
import tensorflow as tf

from tests.engines import KERAS, needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.data import input as input_lib, mix
from trainer.objective import loss as loss_lib, metrics

B, S, C = 6, 16, 10
SEED = tf.constant([3, 5], tf.int64)


def flat_batch():
    """B images, image i all of value i / 10 (so a pixel says whose it is), labels 0..B-1."""
    values = np.arange(B, dtype=np.float32) / 10.0
    return (tf.constant(np.broadcast_to(values[:, None, None, None], [B, S, S, 3]).copy()),
            tf.range(B, dtype=tf.int32))


def own_and_partner_shares(labels):
    """Each row's share of its own class and of its partner's (B-1-i)."""
    rows = np.arange(B)
    return labels[rows, rows], labels[rows, rows[::-1]]


def test_mixup_blends_pixels_and_labels_by_the_same_lambda():
    images, labels = flat_batch()
    mixed, soft = mix.mix_batch(images, labels, {"mixup_alpha": 0.8, "num_classes": C}, SEED)
    soft = soft.numpy()
    assert soft.shape == (B, C) and soft.dtype == np.float32
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=1e-6)
    own, partner = own_and_partner_shares(soft)
    values = np.arange(B) / 10.0
    expected = own * values + partner * values[::-1]
    np.testing.assert_allclose(mixed.numpy()[:, 0, 0, 0], expected, atol=1e-6)
    assert np.all(mixed.numpy() == mixed.numpy()[:, :1, :1, :1])  # the same blend everywhere


def test_cutmix_pastes_a_box_whose_area_share_is_the_partners_label_share():
    images, labels = flat_batch()
    mixed, soft = mix.mix_batch(images, labels, {"cutmix_alpha": 1.0, "num_classes": C}, SEED)
    mixed, soft = mixed.numpy()[..., 0], soft.numpy()
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=1e-6)
    own, _ = own_and_partner_shares(soft)
    values = np.arange(B, dtype=np.float32) / 10.0
    assert np.any(own < 1.0)
    for i in range(B):
        is_partner = mixed[i] == values[B - 1 - i]
        assert np.all(is_partner | (mixed[i] == values[i]))  # pasted, not blended
        np.testing.assert_allclose(1.0 - is_partner.mean(), own[i], atol=1e-6)
        if is_partner.any() and i != B - 1 - i:  # the pasted pixels form one box
            rows, cols = np.nonzero(is_partner)
            assert is_partner[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()


@pytest.mark.parametrize("switch_prob, is_cutmix", [(1.0, True), (0.0, False)])
def test_with_both_on_the_switch_probability_picks_cutmix_or_mixup(switch_prob, is_cutmix):
    images, labels = flat_batch()
    params = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "mixup_switch_prob": switch_prob, "num_classes": C}
    mixed, _ = mix.mix_batch(images, labels, params, SEED)
    pixel_values = set(np.round(mixed.numpy().ravel(), 5))
    own_values = set(np.round(np.arange(B, dtype=np.float32) / 10.0, 5))
    assert (pixel_values <= own_values) == is_cutmix  # mixup blends: values between two images


def test_without_mixing_the_batch_and_its_int_labels_pass_through():
    images, labels = flat_batch()
    assert mix.mix_batch(images, labels, {"num_classes": C}, SEED) == (images, labels)


def test_the_same_seed_mixes_the_same_way():
    images, labels = flat_batch()
    params = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "num_classes": C}
    first = mix.mix_batch(images, labels, params, SEED)
    again = mix.mix_batch(images, labels, params, SEED)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.6])
def test_smoothing_a_mixed_target_equals_timm_smoothing_each_one_hot_before_mixing(smoothing):
    """timm's mixup_target: lam x smooth(one_hot(y1)) + (1 - lam) x smooth(one_hot(y2))."""
    logits = tf.constant(np.random.default_rng(0).normal(size=[B, C]), tf.float32)
    labels, lam = np.arange(B), np.linspace(0.1, 0.9, B).astype(np.float32)
    soft = mix.mix_labels(tf.constant(labels), tf.constant(lam), C)
    ours = loss_lib.per_example_cross_entropy(soft, logits, C, smoothing).numpy()

    def smooth(one_hot):
        return one_hot * (1.0 - smoothing) + smoothing / C
    eye = np.eye(C, dtype=np.float32)
    target = lam[:, None] * smooth(eye[labels]) + (1 - lam[:, None]) * smooth(eye[labels[::-1]])
    log_softmax = tf.nn.log_softmax(logits).numpy()
    np.testing.assert_allclose(ours, -(target * log_softmax).sum(axis=1), rtol=1e-5)
    sparse = loss_lib.per_example_cross_entropy(tf.constant(labels, tf.int32), logits, C, smoothing)
    one_hot = loss_lib.per_example_cross_entropy(tf.constant(eye[labels]), logits, C, smoothing)
    np.testing.assert_allclose(one_hot, sparse, rtol=1e-5)  # a one-hot row is its int label


def test_train_accuracy_of_soft_labels_counts_their_largest_share():
    soft = tf.constant([[0.7, 0.3, 0.0], [0.2, 0.0, 0.8]])
    logits = tf.constant([[5.0, 0.0, 0.0], [5.0, 0.0, 0.0]])
    assert float(metrics.batch_accuracy(soft, logits, tf.ones([2]))) == 0.5


ALL_ON = {"augment": "randaugment", "random_erasing": 0.5, "mixup_alpha": 0.8, "cutmix_alpha": 1.0}


def input_params(**overrides):
    return {"batch_size": 4, "image_size": S, "min_crop_area": 0.5, "random_flip": True,
            "shuffle_buffer": 16, "transpose_input": False, "use_bfloat16": False,
            "cache_dataset": False, "num_classes": 3, **overrides}


def test_the_training_input_with_everything_on_is_static_soft_labelled_and_seeded(write_tfrecord_dataset):
    data = write_tfrecord_dataset(counts={"train": 12, "eval": 5}, size=20)
    make = input_lib.make_input_fn(str(data / "train-*"), input_lib.TRAIN, seed=123)
    dataset = make(input_params(**ALL_ON))
    features_spec, labels_spec = dataset.element_spec
    assert features_spec["image"].shape == [4, S, S, 3] and labels_spec.shape == [4, 3]
    assert labels_spec.dtype == tf.float32
    (features, labels), = dataset.take(1)
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, atol=1e-6)
    assert -1.0 <= float(tf.reduce_min(features["image"])) <= float(tf.reduce_max(features["image"])) <= 1.0
    (again, _), = make(input_params(**ALL_ON)).take(1)
    assert np.array_equal(features["image"], again["image"])


def test_evaluation_ignores_the_augmentation(write_tfrecord_dataset):
    data = write_tfrecord_dataset(counts={"train": 4, "eval": 5}, size=20)
    make = input_lib.make_input_fn(str(data / "eval-*"), input_lib.EVAL, 5)
    (plain, plain_labels), = make(input_params()).take(1)
    (augmented, labels), = make(input_params(**ALL_ON)).take(1)
    assert labels.dtype == tf.int32 and np.array_equal(labels, plain_labels)
    assert np.array_equal(augmented["image"], plain["image"])


@pytest.mark.parametrize("engine", [pytest.param("estimator", marks=needs_estimator), KERAS])
@pytest.mark.trains
def test_a_run_trains_with_every_augmentation_and_resumes_with_another(tiny_dataset, tmp_path, engine):
    """Through the trainer: mixed soft labels reach the engine's loss and the run finishes; a
    changed augmentation on its checkpoints is not a change of what the run is (the table marks
    these settings on_resume="record"), so resuming with it is allowed, as with --min_crop_area."""
    from trainer import chain, task
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", mode="train",
                        eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / "out",
                        engine=engine, label_smoothing="0.1",
                        **{key: str(value) for key, value in ALL_ON.items()}))
    task.main(argv)
    assert tf.train.latest_checkpoint(str(tmp_path / "out")).endswith("-4")
    resumed = chain.parse_params(argv + ["--augment=autoaugment", "--mixup_alpha=0", "--train_steps=6"])
    assert (resumed["augment"], resumed["mixup_alpha"], resumed["cutmix_alpha"]) == ("autoaugment", 0.0, 1.0)
