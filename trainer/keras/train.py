"""Training: TrainingModel.train_step run steps_per_execution steps per call, a checkpoint every save_checkpoints_steps.

The train function is a tf.function that runs `steps` calls of train_step, each under
strategy.run on the next global batch of one iterator over the input pipeline: Keras'
steps_per_execution, TPUEstimator's iterations_per_loop, whose value it takes (on a TPU
one compiled program per call; elsewhere one call instead of a Python round trip per
step). A call stops early at a multiple of save_checkpoints_steps and at max_steps,
where the CheckpointManager writes model.ckpt-<step>: checkpoints fall on the steps the
Estimator engine writes them at, and a run killed at any point resumes from the newest
one. SIGTERM (preemption) and Ctrl-C let the call under way end and save the step it
reached (train). A call returns every step's logs, and the summaries of the steps that are
multiples of save_summary_steps are written from them: no call ends early for a
summary. The iterator lives as long as the engine, so each round continues the same
shuffled stream instead of starting it again.

Why this loop and not model.fit: fit would run the same train_step, but the wall time of
its calls varied far more at the same CPU time per step than this loop's
(docs/migration.md#why-not-modelfit-itself), and a fit per checkpoint would restart the
input stream each time. TensorBoard gets loss, learning_rate,
train_accuracy, global_step/sec and examples/sec in OUT every save_summary_steps, and off a
TPU the step's first input images (trainer/run/input_images.py); the
progress line (trainer/run/progress.py's) shows every progress_seconds.

    .venv/bin/python -m trainer.task --engine keras --mode train --output_dir OUT ...
"""
import tensorflow as tf

from common import console
from trainer.data import input as input_lib
from trainer.keras import input_context
from trainer.run import eval_pictures, input_images, training_log


def make_train_iterator(params, strategy, start_step=0):
    """An iterator over trainer/data/input.py's TRAIN pipeline, train_batch_size examples a
    step: each input pipeline (host) reads its own files in per-replica batches
    (trainer/keras/input_context.py); seeded (--seed) by the step it starts at, as the
    Estimator engine seeds each round's."""
    input_fn = input_lib.make_input_fn(params["train_data_path"], input_lib.TRAIN,
                                       seed=input_lib.train_seed(params["seed"], start_step))
    return iter(input_context.distribute_input_fn(strategy, input_fn, params,
                                                  params["train_batch_size"]))


EVERY_STEP = "every_step"  # the train function's key for each step's logs


def make_train_function(model, strategy):
    """train_function(iterator, steps) -> the last step's logs (their mean over replicas), and
    under EVERY_STEP {name: [steps] values} each step's, kept on the host as the loop runs: a
    summary can be written at any step of the call (TPUEstimator's host_call outfeeds them
    every step) without ending the call there. The input images go to TensorBoard as the
    step that took them ends (make_show_images)."""
    show_images = make_show_images(model, strategy)

    def step(iterator):
        batch = next(iterator)
        logs = strategy.run(model.train_step, args=(batch,))
        show_images(batch)
        return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
                for name, value in logs.items()}

    @tf.function
    def train_function(iterator, steps):
        logs = step(iterator)
        size = tf.cast(steps, tf.int32)
        history = {name: tf.TensorArray(value.dtype, size=size).write(0, value)
                   for name, value in logs.items()}
        for i in tf.range(1, size):
            logs = step(iterator)
            history = {name: history[name].write(i, value) for name, value in logs.items()}
        return dict(logs, **{EVERY_STEP: {name: values.stack() for name, values in history.items()}})
    return train_function


def make_show_images(model, strategy):
    """show_images(batch), run after the batch's step: at a multiple of save_summary_steps (the
    scalars' steps, trainer/run/training_log.py) the first images of this host's first replica
    go to TensorBoard (trainer/run/input_images.py), encoded only at those steps. Not on a TPU,
    as in the Estimator engine: an image copied off the device inside the loop."""
    settings = model.settings
    if settings["use_tpu"]:
        return lambda batch: None
    every = settings["save_summary_steps"]

    def show_images(batch):
        # The scalars' writer (TrainingLog's), made when training traces this, not with the
        # engine: an engine that only exports or evaluates leaves no event file in OUT.
        with tf.init_scope():
            writer = eval_pictures.eval_writer(settings["output_dir"])
        images = strategy.experimental_local_results(batch[0]["image"])[0]
        step = model.step.read_value()  # counts the step just run, as its scalars do
        tf.cond(step % every == 0, lambda: input_images.write_images(writer, images, step),
                lambda: tf.constant(False))
    return show_images


def train(model, train_function, iterator, manager, params, max_steps):
    """Trains model (a TrainingModel) from its step to max_steps, each call of train_function
    (make_train_function's) on the next batches of iterator, saving checkpoints with manager (a
    tf.train.CheckpointManager); returns the final step.

    SIGTERM (a preempted TPU VM, a stopped Vertex job) and Ctrl-C are deferred to the end of
    the call under way (console.deferring_termination): its step is saved as
    model.ckpt-<step>, and console.Terminated (KeyboardInterrupt) ends the run with one line
    naming it. Calls are planned from the multiples of save_checkpoints_steps, so the resumed
    run's checkpoints fall on them again."""
    log = training_log.TrainingLog(params, int(model.step.numpy()))
    step = log.start_step
    with console.deferring_termination():
        for steps in training_log.plan_executions(step, max_steps, params):
            try:
                logs = train_function(iterator, tf.constant(steps, tf.int64))
            except tf.errors.OutOfRangeError:  # no full batch: trainer/run/rounds.py says so
                break
            step = int(model.step.numpy())
            log.after_call(step, {name: values.numpy() for name, values in logs[EVERY_STEP].items()})
            is_terminating = console.is_termination_requested()  # read once: it may come any time
            if is_terminating or step % params["save_checkpoints_steps"] == 0 or step == max_steps:
                manager.save(checkpoint_number=step)
            if is_terminating:
                break
        log.report(step)
    return step
