"""Hyperparameter tuning on AI Platform Training and Vertex AI: one output directory and one
reported metric per trial.

Both services run the training command once per trial, each time with other
hyperparameter flags (--learning_rate=0.0312 ...) but the same --job-dir /
--output_dir, so:

  * each trial writes to OUT/<trial id> (the flowers sample's rule), or two trials would
    resume each other's checkpoints. The id is TF_CONFIG's task.trial (AI Platform
    Training) or the CLOUD_ML_TRIAL_ID environment variable (Vertex AI; also what
    cloudml-hypertune reads). A rerun of a trial resumes its own directory.
  * each evaluation reports --early_stopping_metric (accuracy unless set; the same metric
    picks the best export) the two ways the services read it: as a TensorBoard summary
    tag (Estimator writes every eval metric under OUT/eval/; AI Platform's
    hyperparameterMetricTag names it), and through cloudml-hypertune's metrics file
    (Vertex AI reads only that; AI Platform custom containers read it too).

Outside a trial neither happens. cloud/ai_platform_hptuning.yaml and
cloud/vertex_hptuning_job.yaml are the job configurations.

    CLOUD_ML_TRIAL_ID=3 .venv/bin/python -m trainer.cloud.hptuning gs://B/job   # -> gs://B/job/3
"""
import logging
import os
import posixpath
import sys

import hypertune

from trainer.cloud import tf_config

TRIAL_ENV = "CLOUD_ML_TRIAL_ID"
_reporter = None  # one HyperTune per process: it rewrites its file with every report it holds


def trial_id(environ=None):
    """The hyperparameter-tuning trial this process runs ("3"), or None outside a trial."""
    environ = os.environ if environ is None else environ
    task = tf_config.read_tf_config(environ).get("task") or {}
    trial = str(task.get("trial") or environ.get(TRIAL_ENV) or "").strip()
    return trial or None


def trial_output_dir(output_dir, environ=None):
    """output_dir/<trial id> in a tuning trial; output_dir unchanged otherwise (or if unset)."""
    trial = trial_id(environ)
    if not output_dir or trial is None:
        return output_dir
    return posixpath.join(str(output_dir).rstrip("/"), trial)


def report_metric(params, record, environ=None):
    """Reports record's value of the run's metric through cloudml-hypertune, in a trial only.

    Returns the value reported, or None outside a trial.
    """
    global _reporter
    if trial_id(environ) is None:
        return None
    metric = params["early_stopping_metric"]
    if _reporter is None:
        _reporter = hypertune.HyperTune()
    _reporter.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=metric, metric_value=record[metric],
        global_step=record["global_step"])
    logging.info("Reported %s=%s at step %d for trial %s (%s)", metric, record[metric],
                 record["global_step"], trial_id(environ), _reporter.metric_path)
    return record[metric]


if __name__ == "__main__":
    print(trial_output_dir(sys.argv[1]))
