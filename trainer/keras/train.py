"""Training: TrainingModel.train_step run steps_per_execution steps per call, a checkpoint every save_checkpoints_steps.

The train function is a tf.function that runs `steps` calls of train_step, each under
strategy.run on the next global batch of one iterator over the input pipeline: Keras'
steps_per_execution, TPUEstimator's iterations_per_loop, whose value it takes (on a TPU
one compiled program per call; elsewhere one call instead of a Python round trip per
step). A call stops early at a multiple of save_checkpoints_steps and at max_steps,
where the CheckpointManager writes model.ckpt-<step>: checkpoints fall on the steps the
Estimator engine writes them at, and a run killed at any point resumes from the newest
one. The iterator lives as long as the engine, so each round continues the same
shuffled stream instead of starting it again.

Why this loop and not model.fit: fit would run the same train_step, but on the 2 shared
cores here the wall time of fit's calls varied threefold at the same CPU time per step
(bench/bench_train.py, 2026-11-24; this loop did not), and a fit per checkpoint would
restart the input stream each time. TensorBoard gets loss, learning_rate,
train_accuracy, global_step/sec and examples/sec in OUT every save_summary_steps; the
progress line (trainer/run/progress.py's) shows every progress_seconds.

    .venv/bin/python -m trainer.task --engine keras --mode train --output_dir OUT ...
"""
import logging
import time

import tensorflow as tf

from trainer.data import input as input_lib
from trainer.keras import input_context
from trainer.report import eval_pictures
from trainer.run import progress

_PROGRESS = logging.getLogger("trainer.run.progress")  # the Estimator engine's progress logger


def make_train_iterator(params, strategy, start_step=0):
    """An iterator over trainer/data/input.py's TRAIN pipeline, train_batch_size examples a
    step: each input pipeline (host) reads its own files in per-replica batches
    (trainer/keras/input_context.py); seeded (--seed) by the step it starts at, as the
    Estimator engine seeds each round's."""
    input_fn = input_lib.make_input_fn(params["train_data_path"], input_lib.TRAIN,
                                       seed=input_lib.train_seed(params["seed"], start_step))
    return iter(input_context.distribute_input_fn(strategy, input_fn, params,
                                                  params["train_batch_size"]))


def make_train_function(model, strategy):
    """train_function(iterator, steps) -> the last step's logs (their mean over replicas)."""
    def step(iterator):
        logs = strategy.run(model.train_step, args=(next(iterator),))
        return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
                for name, value in logs.items()}

    @tf.function
    def train_function(iterator, steps):
        logs = step(iterator)
        for _ in tf.range(steps - 1):
            logs = step(iterator)
        return logs
    return train_function


def plan_executions(step, max_steps, params):
    """[steps of each call] from step to max_steps: at most iterations_per_loop each, none
    across a multiple of save_checkpoints_steps."""
    plan, every = [], params["save_checkpoints_steps"]
    while step < max_steps:
        end = min((step // every + 1) * every, max_steps, step + params["iterations_per_loop"])
        plan.append(end - step)
        step = end
    return plan


def train(engine, max_steps):
    """Trains engine.model from its step to max_steps, saving checkpoints; returns the final step."""
    params, model = engine.params, engine.model
    log = TrainingLog(params, int(model.step.numpy()))
    step = log.start_step
    for steps in plan_executions(step, max_steps, params):
        try:
            logs = engine.train_function(engine.train_iterator(), tf.constant(steps, tf.int64))
        except tf.errors.OutOfRangeError:  # no full batch: trainer/run/rounds.py says so
            break
        step = int(model.step.numpy())
        log.after_call(step, logs)
        if step % params["save_checkpoints_steps"] == 0 or step == max_steps:
            engine.manager.save(checkpoint_number=step)
    log.report(step)
    return step


class TrainingLog:
    """TensorBoard scalars every save_summary_steps and the progress line every progress_seconds."""

    def __init__(self, params, start_step):
        self.settings, self.start_step = params, start_step
        self.writer = eval_pictures.eval_writer(params["output_dir"])  # one events file per process
        self.start = self.last_print = self.last_summary_time = time.monotonic()
        self.last_summary, self.loss = start_step, None

    def after_call(self, step, logs):
        self.loss = float(logs["cross_entropy"])
        every = self.settings["save_summary_steps"]
        if step // every > self.last_summary // every:
            self.write_summaries(step, logs)
        if time.monotonic() - self.last_print >= self.settings["progress_seconds"]:
            self.report(step)

    def write_summaries(self, step, logs):
        """The scalars Estimator writes: loss, learning_rate, train_accuracy, steps and examples/s."""
        now = time.monotonic()
        rate = (step - self.last_summary) / max(now - self.last_summary_time, 1e-9)
        with self.writer.as_default():
            for name in ("loss", "learning_rate", "train_accuracy"):
                tf.summary.scalar(name, float(logs[name]), step=step)
            tf.summary.scalar("global_step/sec", rate, step=step)
            tf.summary.scalar("examples/sec", rate * self.settings["train_batch_size"], step=step)
        self.writer.flush()
        self.last_summary, self.last_summary_time = step, now

    def report(self, step):
        """One progress line: the step, the cross entropy, examples/s and the time left."""
        elapsed = time.monotonic() - self.start
        rate = (step - self.start_step) / elapsed if step > self.start_step and elapsed > 0 else None
        eta = (self.settings["train_steps"] - step) / rate if rate else None
        _PROGRESS.info(progress.format_line(step, self.settings["train_steps"], self.loss,
                                            rate * self.settings["train_batch_size"] if rate else None, eta))
        self.last_print = time.monotonic()
