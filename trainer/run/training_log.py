"""What both Keras-API engines' training loops share: the calls they plan and the log they keep.

A call runs up to iterations_per_loop steps on the device without a host round trip
(TPUEstimator's iterations_per_loop, Keras' steps_per_execution) and never crosses a
multiple of save_checkpoints_steps, where a checkpoint is written; after each call the
log writes TensorBoard's scalars for the steps of the call that are multiples of
save_summary_steps (no call ends early for a summary) and shows the progress line every
progress_seconds. Used by trainer/keras/train.py and trainer/jax/train.py.

    .venv/bin/python -m pytest tests/trainer/test_keras_engine.py -k plan
"""
import time

import tensorflow as tf

from trainer.run import eval_pictures, progress


def plan_executions(step, max_steps, params):
    """[steps of each call] from step to max_steps: at most iterations_per_loop each, none
    across a multiple of save_checkpoints_steps."""
    plan, every = [], params["save_checkpoints_steps"]
    while step < max_steps:
        end = min((step // every + 1) * every, max_steps, step + params["iterations_per_loop"])
        plan.append(end - step)
        step = end
    return plan


class TrainingLog:
    """TensorBoard scalars at each multiple of save_summary_steps and the progress line every
    progress_seconds; a process that does not write OUT (is_writer False) shows the line only."""

    def __init__(self, params, start_step, is_writer=True):
        self.params, self.start_step = params, start_step
        # One events file per process that writes OUT; none from the other hosts of a slice.
        self.writer = eval_pictures.eval_writer(params["output_dir"]) if is_writer else None
        self.start = self.last_print = self.last_call_end = time.monotonic()
        self.loss = None
        self.line = progress.ProgressLine(params["train_steps"])

    def after_call(self, step, history):
        """step: the step the call ended at; history: {name: [steps] NumPy values}, each step's
        loss, cross_entropy, train_accuracy and learning_rate."""
        self.loss = float(history["cross_entropy"][-1])
        now = time.monotonic()
        steps = len(history["cross_entropy"])
        self.write_summaries(step - steps + 1, history, steps / max(now - self.last_call_end, 1e-9))
        self.last_call_end = now
        if now - self.last_print >= self.params["progress_seconds"]:
            self.report(step)

    def write_summaries(self, first_step, history, steps_per_sec):
        """The scalars Estimator writes (loss, learning_rate, train_accuracy, steps and
        examples/s) at each step of the call that is a multiple of save_summary_steps: the
        logs of the step that ended there (model.step counts it), the rate the call's."""
        every = self.params["save_summary_steps"]
        steps = [step for step in range(first_step, first_step + len(history["loss"])) if step % every == 0]
        if self.writer is None:
            return
        with self.writer.as_default():
            for step in steps:
                for name in ("loss", "learning_rate", "train_accuracy"):
                    tf.summary.scalar(name, float(history[name][step - first_step]), step=step)
                tf.summary.scalar("global_step/sec", steps_per_sec, step=step)
                tf.summary.scalar("examples/sec", steps_per_sec * self.params["train_batch_size"], step=step)
        if steps:
            self.writer.flush()

    def report(self, step):
        """One progress line: the step, the cross entropy, examples/s and the time left."""
        elapsed = time.monotonic() - self.start
        rate = (step - self.start_step) / elapsed if step > self.start_step and elapsed > 0 else None
        eta = (self.params["train_steps"] - step) / rate if rate else None
        self.line.show(step, self.loss, rate * self.params["train_batch_size"] if rate else None, eta)
        self.last_print = time.monotonic()
