"""A hyperparameter-tuning trial rehearsed with `gcloud ai-platform local train`.

gcloud writes TF_CONFIG itself; AI Platform adds the trial id to its task during tuning.
The trial's part of the service is played by the local Python gcloud runs (a two-line
wrapper adding task.trial, as the service does); the rest is the real command with a
hyperparameter flag appended the way the service appends it. This is also the suite's
single-process `gcloud ai-platform local train` (exit code 0, nothing left running, a
servable export); the cluster is tests/cloud/test_gcloud_local_train.py's.

    .venv/bin/python -m pytest tests/cloud/test_hptuning_local_train.py
"""
import json
import os
import sys

import pytest
import tensorflow as tf

from tests.cloud.test_gcloud_local_train import GCLOUD, gcloud_env, run_gcloud, train_args
from tests.conftest import write_dataset
from trainer.export import contract

pytestmark = [pytest.mark.skipif(GCLOUD is None, reason="gcloud (Google Cloud SDK) is not installed"),
              pytest.mark.process]
TRIAL = "7"
# What the local Python gcloud starts does first (tests/cloud/test_gcloud_local_train.py's
# local_python_for_gcloud): TF_CONFIG gets the trial's id, as AI Platform sets it.
TRIAL_LINES = """TF_CONFIG="$("PYTHON" -c 'import json, os
config = json.loads(os.environ.get("TF_CONFIG") or "{}")
config.setdefault("task", {})["trial"] = "TRIAL"
print(json.dumps(config))')"
export TF_CONFIG
"""


@pytest.fixture
def trial_env(tmp_path):
    """gcloud's environment: a private config whose local Python sets the trial."""
    env = gcloud_env(tmp_path, before_exec=TRIAL_LINES.replace("PYTHON", sys.executable).replace("TRIAL", TRIAL),
                     CLOUD_ML_HP_METRIC_FILE=tmp_path / "hypertune" / "output.metrics")
    env.pop("CLOUD_ML_TRIAL_ID", None)  # the trial is the wrapper's
    return env


def eval_summary_tags(eval_dir):
    """The scalar tags of the TensorBoard event files Estimator's evaluation wrote."""
    tags = set()
    for path in tf.io.gfile.glob(os.path.join(eval_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def test_a_trial_writes_to_its_subdirectory_and_reports_its_metric(trial_env, tmp_path):
    dataset = write_dataset(tmp_path / "data", {"train": 16, "eval": 11}, size=20)
    job_dir = tmp_path / "job"
    args = train_args(dataset, job_dir, 2, 2) + ["--learning_rate=0.05"]  # the service's flag
    code, output, leftovers = run_gcloud(args, trial_env)
    assert code == 0, output[-4000:]
    assert leftovers == []
    assert os.listdir(job_dir) == [TRIAL]
    trial_dir = job_dir / TRIAL
    params = json.loads((trial_dir / "params.json").read_text())
    assert (params["output_dir"], params["learning_rate"]) == (str(trial_dir), 0.05)
    contract.check_export(str(trial_dir / "export" / "image_classifier" / "2"))
    (record,) = [json.loads(line) for line in (trial_dir / "eval_results.jsonl").read_text().splitlines()]
    assert "accuracy" in eval_summary_tags(trial_dir / "eval")  # AI Platform's hyperparameterMetricTag
    (report,) = [json.loads(line) for line in
                 (tmp_path / "hypertune" / "output.metrics").read_text().splitlines()]
    assert (float(report["accuracy"]), report["global_step"]) == (record["accuracy"], "2")
