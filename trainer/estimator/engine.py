"""The Estimator engine: one TPUEstimator that trains, evaluates, exports and predicts for trainer/run/.

The rounds, the eval records, the best export, early stopping and every check of the
run directory are the driver's (trainer/run/driver.py, rounds.py, evaluations.py),
the same for both engines; this module makes the TPUEstimator (its RunConfig and
TPUConfig) and answers the Engine calls (trainer/run/engine.py) with it. Killed at any point
(kill -9 included), the same command resumes from the last checkpoint; SIGTERM
(preemption) and Ctrl-C first end the session.run under way and save the step it reached.
--mode continuous_eval is the separate evaluation job (trainer/run/continuous_eval.py).

    .venv/bin/python -m trainer.task --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT
"""
import tensorflow as tf

from common import console
from trainer.cloud import tf_config, tpu
from trainer.data import input as input_lib
from trainer.estimator import export, model, predict
from trainer.run import checkpoints, driver, predictions, progress
from trainer.run.engine import Engine
from trainer.settings import table

ModeKeys = tf.estimator.ModeKeys


def make_run_config(params):
    """RunConfig; a TPU cluster resolver only when use_tpu (it needs a reachable TPU)."""
    cluster = None
    if params["use_tpu"]:
        cluster = tpu.resolve_tpu(params)
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
        # The graph-level seed of every graph it builds: initial weights and dropout (--seed; 0: none).
        tf_random_seed=params["seed"] or None,
        # Device filters in a TF_CONFIG ps cluster (trainer/cloud/tf_config.py); None otherwise.
        session_config=tf_config.make_session_config(tf_config.read_tf_config()),
        # No graph.pbtxt nor model.ckpt-N.meta: nothing reads them (the export is the servable,
        # TensorBoard's graph is in the events file either way), and each training round's
        # session wrote the whole graph as text first, in Python: 9 of the 46 s of
        # tests/trainer/test_imagenet_networks.py's MobileNetV2 round, and again every round.
        checkpoint_save_graph_def=False,
        tpu_config=tpu_config)


def make_estimator(params):
    """The TPUEstimator; with use_tpu off it runs the same model_fn on CPU/GPU."""
    return tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model.model_fn, config=make_run_config(params),
        params=table.estimator_params(params), use_tpu=params["use_tpu"],
        train_batch_size=params["train_batch_size"], eval_batch_size=params["eval_batch_size"],
        predict_batch_size=params["predict_batch_size"],
        export_to_tpu=False)  # a CPU-servable SavedModel: no TPU ops in the serving graph


class StopOnTerminationHook(tf.compat.v1.train.SessionRunHook):
    """Stops training after the session.run under way (iterations_per_loop steps on a TPU)
    once SIGTERM or Ctrl-C came, as StopAtStepHook stops it at max_steps."""

    def after_run(self, run_context, run_values):
        if console.is_termination_requested():
            run_context.request_stop()


class EstimatorEngine(Engine):
    """trainer/run/engine.py's Engine, made of one TPUEstimator."""

    def __init__(self, params):
        self.params = params
        self.estimator = make_estimator(params)
        self.eval_dir = self.estimator.eval_dir()  # OUT/eval

    def train(self, max_steps):
        # Each call reads the input from its start again: a new seeded order per round.
        start_step = checkpoints.latest_checkpoint(self.params["output_dir"])[1]
        train_input_fn = input_lib.make_input_fn(
            self.params["train_data_path"], ModeKeys.TRAIN,
            seed=input_lib.train_seed(self.params["seed"], start_step))
        # SIGTERM or Ctrl-C: the session.run under way ends, StopOnTerminationHook stops the
        # loop, the Estimator's CheckpointSaverHook saves the step reached as training ends
        # (end()), then deferring_termination raises console.Terminated (KeyboardInterrupt):
        # one line, exit 143 (130).
        with console.deferring_termination():
            self.estimator.train(train_input_fn, max_steps=max_steps,
                                 hooks=[progress.make_progress_hook(self.params),
                                        StopOnTerminationHook()])

    def evaluate(self, checkpoint_path):
        """Estimator's metrics of one checkpoint over every eval image once (model.make_metric_fn)."""
        params = self.params
        eval_input_fn = input_lib.make_input_fn(
            params["eval_data_path"], ModeKeys.EVAL, num_examples=params["num_eval_examples"])
        # ceil(N / global batch): input_fn pads the last batch with zero-weight rows.
        steps = input_lib.eval_steps(params["num_eval_examples"], params["eval_batch_size"])
        return self.estimator.evaluate(eval_input_fn, steps=steps, checkpoint_path=checkpoint_path)

    def export(self, checkpoint_path, staging_base):
        return export.write_saved_model(self.estimator, self.params, checkpoint_path, staging_base)

    def predict(self, checkpoint_path):
        def predict_fn(jpeg_chunks, checkpoint):
            # A TPU's input pipeline may run on a host without Python: no streamed generator there.
            return predict.predict_with_estimator(self.estimator, jpeg_chunks, checkpoint,
                                                  is_streamed=not self.params["use_tpu"])
        return predictions.run_predict(predict_fn, self.params, checkpoint_path)


def run(params):
    """Runs params["mode"] with the Estimator engine (trainer/run/driver.py)."""
    return driver.run(params, EstimatorEngine)

