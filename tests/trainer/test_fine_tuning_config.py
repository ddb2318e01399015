"""The fine-tuning settings in trainer/settings/table.py: validated by name, and part of a run's identity.

    .venv/bin/python -m pytest tests/trainer/test_fine_tuning_config.py
"""
import re

import pytest
import tensorflow as tf

from tests.trainer.conftest import as_argv
from trainer.settings import checks
from trainer import chain
from trainer.run import params_file


def parse(tiny_argv, **flags):
    """parse_params of tiny_argv plus flags; a True value is a bare boolean flag."""
    booleans = [f"--{key}" for key, value in flags.items() if value is True]
    return chain.parse_params(tiny_argv + as_argv({k: v for k, v in flags.items() if v is not True})
                               + booleans)


def test_defaults_keep_the_run_as_it_was(tiny_params):
    """Nothing fine-tuning adds changes a run that does not ask for it."""
    assert {key: tiny_params[key] for key in (
        "lr_schedule", "label_smoothing", "moving_average_decay", "freeze_backbone",
        "backbone_learning_rate_multiplier", "warm_start_from", "hub_module")} == {
        "lr_schedule": "cosine", "label_smoothing": 0.0, "moving_average_decay": 0.0,
        "freeze_backbone": False, "backbone_learning_rate_multiplier": 1.0,
        "warm_start_from": None, "hub_module": None}
    assert tiny_params["warm_start_exclude"] == "^logits/"


@pytest.mark.parametrize("flags, message", [
    ({"lr_schedule": "linear"}, "lr_schedule='linear' (flag --lr_schedule) must be one of ['cosine', 'step']"),
    ({"label_smoothing": "1.0"}, "label_smoothing=1.0 (flag --label_smoothing) must be in [0, 1)"),
    ({"moving_average_decay": "-0.1"}, "moving_average_decay=-0.1 (flag --moving_average_decay) must be in [0, 1)"),
    ({"model": "mobilenet_v2", "backbone_learning_rate_multiplier": "0"},
     "backbone_learning_rate_multiplier=0.0 (flag --backbone_learning_rate_multiplier) must be > 0"),
    ({"freeze_backbone": True}, "freeze_backbone=True (flag --freeze_backbone) needs a network with a "
                                  "backbone, not model='small_cnn' (default) (one of ['resnet50', "
                                  "'efficientnet_b0', 'mobilenet_v2', 'efficientnetv2_b0', "
                                  "'efficientnetv2_s', 'convnext_tiny', 'hub'])"),
    ({"model": "convnext_tiny", "image_size": "32", "batch_norm_momentum": "0.99"},
     "batch_norm_momentum=0.99 (flag --batch_norm_momentum) is not read by model='convnext_tiny' (flag "
     "--model): it has layer norm, not batch norm; drop the setting"),
    ({"model": "efficientnetv2_s"}, "image_size=16 (flag --image_size) is too small for "
                                    "model='efficientnetv2_s' (at least 32)"),
    ({"backbone_learning_rate_multiplier": "0.1"}, "backbone_learning_rate_multiplier=0.1 (flag "
                                                   "--backbone_learning_rate_multiplier) needs a network"),
    ({"model": "hub"}, "model='hub' (flag --model) needs --hub_module PATH"),
    ({"hub_module": "/m"}, "hub_module='/m' (flag --hub_module) is only read by --model hub, not 'small_cnn'"),
    ({"model": "resnet50"}, "image_size=16 (flag --image_size) is too small for model='resnet50' (at least 32)"),
    ({"warm_start_exclude": "logits/("}, "warm_start_exclude='logits/(' (flag --warm_start_exclude) must be "
                                         "a regular expression"),
])
def test_bad_fine_tuning_settings_are_named(tiny_argv, flags, message):
    with pytest.raises(checks.ConfigError, match=re.escape(message)):
        parse(tiny_argv, **flags)


def fake_checkpoint(params):
    """params.json and a checkpoint in params["output_dir"]: a run that has started."""
    params_file.write_params(params)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        step = tf.compat.v1.train.get_or_create_global_step()
        session.run(step.initializer)
        tf.compat.v1.train.Saver().save(session, f"{params['output_dir']}/model.ckpt", global_step=1)


@pytest.mark.parametrize("first, second, change", [
    ({"moving_average_decay": "0.0"}, {"moving_average_decay": "0.99"}, "moving_average_decay 0.0 -> 0.99"),
    ({"model": "mobilenet_v2", "image_size": "32"},
     {"model": "mobilenet_v2", "image_size": "32", "freeze_backbone": True},
     "freeze_backbone False -> True"),
])
def test_resuming_with_another_graph_is_refused(tiny_argv, first, second, change):
    fake_checkpoint(parse(tiny_argv, **first))
    with pytest.raises(checks.ConfigError, match=re.escape(change)):
        parse(tiny_argv, **second)
    # What only steers training may change between rounds.
    resumed = parse(tiny_argv, **first, label_smoothing="0.1", lr_schedule="step")
    assert (resumed["label_smoothing"], resumed["lr_schedule"]) == (0.1, "step")
