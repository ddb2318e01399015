"""Training progress for people: one line at a steady cadence, Keras-style, fit for logs.

    step 500/1500  loss 0.0874  763 examples/s  ETA 1:18

Printed every progress_seconds (and when a training call ends, unless the line on time
already showed that step) to stderr through the "trainer.run.progress" logger, so it
shows in quiet mode and in non-TTY logs alike (no carriage returns). The loss is the data
term (cross-entropy) model_fn puts in LOSS_COLLECTION, the Keras engine's "cross_entropy":
not tf.GraphKeys.LOSSES, to which Estimator.train adds the total loss as well, so that
their sum would show the data term twice (plus the L2 term). On a TPU the loss lives
inside the TPU loop, so the line shows steps, throughput and ETA only there (the loss
is in TensorBoard).

    .venv/bin/python -m trainer.run.progress 500 1500 0.0874 763 78   # print one line
"""
import datetime
import logging
import sys
import time

import tensorflow as tf

_LOGGER = logging.getLogger("trainer.run.progress")
LOSS_COLLECTION = "trainer_progress_loss"  # the graph collection of the loss the line shows


def format_line(step, total, loss, examples_per_sec, eta_seconds):
    parts = [f"step {step}/{total}"]
    if loss is not None:
        parts.append(f"loss {loss:.4f}")
    if examples_per_sec is not None:
        parts.append(f"{examples_per_sec:,.0f} examples/s")
    if eta_seconds is not None:
        parts.append(f"ETA {datetime.timedelta(seconds=round(eta_seconds))}")
    return "  ".join(parts)


class ProgressLine:
    """Logs format_line(...) for a step, once: the line a call prints as it ends is not
    printed again when the line on time (every progress_seconds) already showed that step."""

    def __init__(self, total_steps):
        self.total, self.last_step = total_steps, None

    def show(self, step, loss, examples_per_sec, eta_seconds):
        if step != self.last_step:
            _LOGGER.info(format_line(step, self.total, loss, examples_per_sec, eta_seconds))
            self.last_step = step


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Logs format_line(...) every `seconds` of training and once at the end of the call."""

    def __init__(self, total_steps, global_batch_size, seconds, use_tpu=False):
        self._total, self._batch, self._seconds = total_steps, global_batch_size, seconds
        self._line = ProgressLine(total_steps)
        self._use_tpu = use_tpu
        self._fetches = {}
        self._start = self._last_print = None
        self._last = (None, None)  # (step, loss) of the latest run

    def begin(self):
        self._fetches = {"step": tf.compat.v1.train.get_global_step()}
        losses = tf.compat.v1.get_collection(LOSS_COLLECTION)
        if losses and not self._use_tpu:
            self._fetches["loss"] = losses[-1]  # one per model_fn call; the training graph has one

    def after_create_session(self, session, coord):
        self._start = (time.monotonic(), int(session.run(self._fetches["step"])))
        self._last_print = self._start[0]

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        self._last = (int(run_values.results["step"]), run_values.results.get("loss"))
        if time.monotonic() - self._last_print >= self._seconds:
            self._report()

    def end(self, session):
        """The last line shows the step the call ended at: a step fetched beside the train
        op may be read before the op increments it."""
        if self._last[0] is not None:
            self._last = (int(session.run(self._fetches["step"])), self._last[1])
            self._report()

    def _report(self):
        now = time.monotonic()
        step, loss = self._last
        steps_done, elapsed = step - self._start[1], now - self._start[0]
        rate = steps_done / elapsed if steps_done > 0 and elapsed > 0 else None
        eta = (self._total - step) / rate if rate else None
        self._line.show(step, None if loss is None else float(loss),
                        rate * self._batch if rate else None, eta)
        self._last_print = now


def make_progress_hook(params):
    return ProgressHook(params["train_steps"], params["train_batch_size"],
                        params["progress_seconds"], params["use_tpu"])


def main(argv):
    step, total, loss, rate, eta = argv[1:6]
    print(format_line(int(step), int(total), float(loss), float(rate), float(eta)))


if __name__ == "__main__":
    main(sys.argv)
