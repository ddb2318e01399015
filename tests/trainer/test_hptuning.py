"""Hyperparameter-tuning trials: the trial id, the trial's output directory, the metric report.

The whole chain under `gcloud ai-platform local train` is tests/cloud/test_hptuning_local_train.py.

    .venv/bin/python -m pytest tests/trainer/test_hptuning.py
"""
import json

import pytest

from trainer import chain
from trainer.run import checkpoints, eval_records
from trainer.estimator import engine as estimator_engine
from trainer.run import evaluations
from trainer.cloud import hptuning


@pytest.mark.parametrize("environ, trial", [
    ({}, None),
    ({"TF_CONFIG": json.dumps({"cluster": {}, "task": {}, "environment": "cloud"})}, None),
    ({"TF_CONFIG": json.dumps({"task": {"type": "master", "index": 0, "trial": "7"}})}, "7"),
    ({"CLOUD_ML_TRIAL_ID": "12"}, "12"),  # Vertex AI
    ({"TF_CONFIG": json.dumps({"task": {"trial": "3"}}), "CLOUD_ML_TRIAL_ID": "3"}, "3"),
])
def test_trial_id_from_tf_config_or_the_vertex_variable(environ, trial):
    assert hptuning.trial_id(environ) == trial
    expected = "gs://b/job/" if trial is None else f"gs://b/job/{trial}"  # unchanged outside one
    assert hptuning.trial_output_dir("gs://b/job/", environ) == expected


def test_a_trial_resolves_into_its_own_directory(tiny_argv, tmp_path, monkeypatch):
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "4")
    params = chain.parse_params(tiny_argv)
    assert params["output_dir"] == str(tmp_path / "out" / "4")


def test_each_evaluation_is_reported_through_hypertune_in_a_trial(tmp_path, monkeypatch):
    metrics_file = tmp_path / "hypertune" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics_file))
    monkeypatch.setattr(hptuning, "_reporter", None)
    params = {"early_stopping_metric": "accuracy"}
    assert hptuning.report_metric(params, {"accuracy": 0.5, "global_step": 2}, environ={}) is None
    assert not metrics_file.exists()  # outside a trial nothing is written
    trial = {"CLOUD_ML_TRIAL_ID": "5"}
    for step, accuracy in ((2, 0.5), (4, 0.75)):
        assert hptuning.report_metric(params, {"accuracy": accuracy, "global_step": step},
                                      environ=trial) == accuracy
    lines = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [(line["accuracy"], line["global_step"]) for line in lines] == [("0.5", "2"), ("0.75", "4")]


def test_an_evaluation_is_recorded_and_reported_once(tiny_params, tmp_path, monkeypatch):
    """A second evaluation of a recorded step (another process got there first) is dropped."""
    reported = []
    monkeypatch.setattr(hptuning, "report_metric", lambda params, record: reported.append(
        (params["early_stopping_metric"], record["global_step"])))
    engine = estimator_engine.EstimatorEngine(tiny_params)
    engine.train(max_steps=2)
    latest = checkpoints.latest_checkpoint(tiny_params["output_dir"]).prefix
    record = evaluations.evaluate_and_record(engine, tiny_params, latest)
    assert record["evaluations_without_improvement"] == 0 and "best_export" in record
    assert evaluations.evaluate_and_record(engine, tiny_params, latest) is None
    assert reported == [("accuracy", 2)]
    assert eval_records.read_eval_results(tiny_params["output_dir"]) == [record]
