"""The train/evaluate/export loop around one TPUEstimator, resumable at any point.

Each round reads the global step from the latest checkpoint in output_dir,
trains to min(step + steps_per_eval, train_steps), evaluates, exports when eval
accuracy (--early_stopping_metric) is the best so far, and appends the results to
OUT/eval_results.jsonl (trainer/estimator/evaluation.py; Estimator also writes them to
TensorBoard under OUT/eval/); with --early_stopping_patience it stops when they stop
improving. Killed at any point (kill -9 included), the same command resumes from the
last checkpoint; run again after it finished, it trains nothing and exports nothing new.
--mode continuous_eval is the separate evaluation job (trainer/estimator/continuous_eval.py).

    .venv/bin/python -m trainer.task --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT
"""
import contextlib
import json
import logging
import os

import tensorflow as tf

from common import signature
from trainer.settings import chain, checks, table
from trainer.estimator import continuous_eval, evaluation, export, model, predict, warm_start
from trainer.data import data_checks, input as input_lib
from trainer.report import hparams_view
from trainer.run import checkpoints, output_lock, progress
from trainer.cloud import tf_config
from trainer.estimator.evaluation import evaluate_and_record, evaluated_steps

ModeKeys = tf.estimator.ModeKeys


def make_run_config(params):
    """RunConfig; a TPU cluster resolver only when use_tpu (it needs a reachable TPU)."""
    cluster = None
    if params["use_tpu"]:
        cluster = resolve_tpu(params)
    tpu_config = tf.compat.v1.estimator.tpu.TPUConfig(
        # Off TPU each session.run is one step; TPUEstimator would still divide
        # log_step_count_steps by iterations_per_loop and log every step.
        iterations_per_loop=params["iterations_per_loop"] if params["use_tpu"] else 1,
        num_shards=params["num_cores"] if params["use_tpu"] else None,
        # One input_fn per host, one dataset per core: the reference's fastest infeed.
        per_host_input_for_training=tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V2)
    return tf.compat.v1.estimator.tpu.RunConfig(
        cluster=cluster, model_dir=params["output_dir"],
        save_checkpoints_steps=params["save_checkpoints_steps"],
        keep_checkpoint_max=params["keep_checkpoint_max"],
        save_summary_steps=params["save_summary_steps"],
        log_step_count_steps=params["log_step_count_steps"],
        # Device filters in a TF_CONFIG ps cluster (trainer/cloud/tf_config.py); None otherwise.
        session_config=tf_config.make_session_config(tf_config.read_tf_config()),
        tpu_config=tpu_config)


def resolve_tpu(params):
    """The TPU's cluster resolver, its address looked up now: without Google Cloud
    credentials (or with a TPU name the API does not know) the run stops here in one
    line naming the fix, not deep inside the first training call."""
    cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=params["tpu"], zone=params["tpu_zone"], project=params["gcp_project"])
    try:
        cluster.master()
    except Exception as err:  # oauth2client's, google.auth's or googleapiclient's error types
        name = type(err).__name__
        if "Credentials" in name:
            raise checks.ConfigError(
                f"use_tpu: no Google Cloud credentials to look up --tpu={params['tpu']!r}: run "
                f"`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), "
                f"or run on a Cloud TPU VM") from None
        if name == "HttpError":
            raise checks.ConfigError(
                f"use_tpu: the Cloud TPU API could not find --tpu={params['tpu']!r} in zone "
                f"{params['tpu_zone']!r}, project {params['gcp_project']!r}: {err}") from None
        raise
    return cluster


def make_estimator(params):
    """The TPUEstimator; with use_tpu off it runs the same model_fn on CPU/GPU."""
    return tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model.model_fn, config=make_run_config(params),
        params=chain.estimator_params(params), use_tpu=params["use_tpu"],
        train_batch_size=params["train_batch_size"], eval_batch_size=params["eval_batch_size"],
        predict_batch_size=params["predict_batch_size"],
        export_to_tpu=False)  # a CPU-servable SavedModel: no TPU ops in the serving graph


def export_latest(estimator, params):
    """Exports the latest checkpoint to OUT/export/<serving_model_name>/<step>/."""
    checkpoint_path, step = checkpoints.latest_checkpoint(params["output_dir"])
    if checkpoint_path is None:
        raise checkpoints.CheckpointError(f"output_dir={params['output_dir']!r} has no checkpoint "
                                          f"to export: train first (--mode train_and_eval)")
    export_base = os.path.join(params["output_dir"], signature.EXPORT_SUBDIR)
    return export.export_model(estimator, params, checkpoint_path, step, export_base)


def check_progress(before, after, params):
    """The new global step; raises if training stopped without advancing it.

    Estimator.train returns quietly when its input ends at once (e.g. no
    records): without this the loop would retrain from the same step forever.
    """
    if after is None or after <= (before or 0):
        raise RuntimeError(
            f"training did not advance past global step {before}: the training input "
            f"{params['train_data_path']!r} yielded no full batch of "
            f"train_batch_size={params['train_batch_size']}")
    return after


def train_and_evaluate(params):
    """Trains to train_steps with an evaluation every steps_per_eval; returns the export path.

    A checkpoint without an eval record (the run was killed before or during
    its evaluation, or mid-training) is evaluated first, so eval_results.jsonl
    and the best export never miss a checkpoint the loop stopped at. With
    early_stopping_patience, the loop ends once that many evaluations in a row
    did not improve on the best (trainer/estimator/evaluation.py stop_early). Mode train
    trains in the same rounds without evaluating (a continuous_eval job does).
    """
    estimator = make_estimator(params)
    train_input_fn = input_lib.make_input_fn(params["train_data_path"], ModeKeys.TRAIN)
    output_dir = params["output_dir"]
    evaluates = params["mode"] == "train_and_eval"
    _, step = checkpoints.latest_checkpoint(output_dir)
    if step:
        logging.getLogger(__name__).info("Resuming from step %d of %d", step, params["train_steps"])
    warm_start.prepare(params, step)  # step 0: check the source (a mismatch stops here); else ignored
    if not step:
        hparams_view.write_hparams(params)  # once per run: TensorBoard's HParams tab
    while True:
        if evaluates and step and step not in evaluated_steps(output_dir):
            evaluate_and_record(estimator, params)
        if step >= params["train_steps"]:
            return export_latest(estimator, params)
        stopped = evaluation.stop_early(estimator, params) if evaluates else None
        if stopped:
            return stopped
        estimator.train(train_input_fn, max_steps=min(step + params["steps_per_eval"],
                                                      params["train_steps"]),
                        hooks=[progress.make_progress_hook(params)])
        step = check_progress(step, checkpoints.latest_checkpoint(output_dir)[1], params)


def run(params):
    """Runs params["mode"] after writing OUT/params.json; returns what the mode produced.

    First, before anything is written: the data is checked against metadata.json and
    the output directory's lock is taken (not for predict, which writes elsewhere and
    leaves checkpoints alone, nor for continuous_eval, which runs beside the trainer
    that holds it). A data error during the run ends as one DatasetError naming the file.
    """
    if params["mode"] == "predict":
        if not params["predict_export_dir"]:
            check_checkpoints(params, repair=False)
        return run_mode(params)
    data_checks.check_before_run(params)
    check_checkpoints(params, repair=False)  # read only: nothing, not even the lock, is written yet
    if params["use_tpu"]:
        resolve_tpu(params)  # no credentials, no such TPU: one line before anything is written
    is_beside_trainer = params["mode"] == "continuous_eval"
    with contextlib.nullcontext() if is_beside_trainer else output_lock.hold_output_dir(params["output_dir"]):
        if not is_beside_trainer:
            check_checkpoints(params, repair=True)  # again under the lock, which may have waited
        try:
            return run_mode(params)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            named = data_checks.explain(err, params)
            if named is None:
                raise
            raise named from None


def check_checkpoints(params, repair):
    """The output dir's checkpoints checked (trainer/run/checkpoints.py) before anything is written;
    the modes that read a checkpoint refuse in one line when there is none."""
    prefix, _ = checkpoints.check_run_state(params["output_dir"], repair=repair)
    if prefix is None and params["mode"] in ("evaluate", "export", "predict"):
        raise checkpoints.CheckpointError(
            f"output_dir={params['output_dir']!r} has no checkpoint to {params['mode']}: train "
            f"first (--mode train_and_eval), or pass the --output_dir of a training run")


def run_mode(params):
    logging.info("Resolved params:\n%s", json.dumps(params, indent=2, sort_keys=True))
    if params["mode"] != "continuous_eval":  # beside a trainer, params.json is the trainer's
        chain.write_params(params)
    if params["mode"] in table.TRAIN_MODES:
        return train_and_evaluate(params)
    estimator = make_estimator(params)
    if params["mode"] == "evaluate":
        return evaluate_and_record(estimator, params, once_per_step=False)
    if params["mode"] == "continuous_eval":
        return continuous_eval.run_continuous_eval(estimator, params)
    if params["mode"] == "predict":
        # By the checked files, not the state file alone: a lost state must not mean random weights.
        checkpoint_path, _ = checkpoints.check_run_state(params["output_dir"], repair=False)
        return predict.run_predict(estimator, params, checkpoint_path)
    return export_latest(estimator, params)
