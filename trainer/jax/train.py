"""The JAX engine's training: the jitted train step over the host's batches, a checkpoint every save_checkpoints_steps.

The step (trainer/jax/model.py JaxModel.train_step) is compiled once per run: every batch
has the same shapes (drop_remainder) and shardings, and the state keeps its own, so no
step or round compiles it again (tests/trainer/jax/test_jax_engine.py counts the
compilations). Calls are planned as the Keras engine's (trainer/run/training_log.py): up to
iterations_per_loop steps dispatched without waiting for the device, never across a
multiple of save_checkpoints_steps, where the state is written (trainer/jax/checkpoint.py);
each call's per-step logs then go to TensorBoard and the progress line, and the first input
images of its summary steps to TensorBoard (trainer/run/input_images.py). SIGTERM (a
preempted TPU VM) and Ctrl-C wait for the call under way, its step is saved and the run
ends with the line naming it (common/console.py deferring_termination). On a multi-host
slice the processes agree after each call whether any of them got the signal
(trainer/jax/processes.py agree_on_stop): all stop after the same call, process 0 saves its
step, and each ends with that line; only process 0 writes TensorBoard.

    .venv-jax/bin/python -m trainer.task --engine jax --mode train --output_dir OUT ...
"""
import jax
import numpy as np

from common import console
from trainer.data import input as input_lib
from trainer.jax import data, processes
from trainer.run import eval_pictures, input_images, training_log


def make_train_batches(params, sharding, start_step=0):
    """An iterator of global (images, labels, weights) batches of train_batch_size examples from
    trainer/data/input.py's TRAIN pipeline (this process's share), seeded by the step it starts
    at as the other engines' streams are."""
    input_fn = input_lib.make_input_fn(params["train_data_path"], input_lib.TRAIN,
                                       seed=input_lib.train_seed(params["seed"], start_step))
    dataset = input_fn(data.host_params(params, params["train_batch_size"]))
    return data.global_batches(dataset, sharding)


def make_train_step(model):
    """The jitted step: (state, images, labels, weights) -> (state, logs); the old state's
    buffers are reused for the new one (donated)."""
    return jax.jit(model.train_step, donate_argnums=0)


def run_call(train_step, state, batches, steps, show_images=lambda index, images: None):
    """steps steps on the next batches: (state, {name: [steps] NumPy values}, steps run). Fewer
    when the stream ends (a pipeline without a full batch left). show_images(i, images): the
    global images of the call's i-th step (0-based), once it is dispatched."""
    history, done = [], 0
    for _ in range(steps):
        batch = next(batches, None)
        if batch is None:
            break
        state, logs = train_step(state, *batch)
        show_images(done, batch[0])
        history.append(logs)
        done += 1
    values = {name: np.asarray([float(logs[name]) for logs in history]) for name in history[0]} if history else {}
    return state, values, done


def show_images(params, step, images, is_writer=True):
    """At a multiple of save_summary_steps (the scalars' steps, trainer/run/training_log.py), the
    first images of step's global batch that this process holds go to TensorBoard
    (trainer/run/input_images.py), as the other engines show them. On a TPU too: three images
    copied to the host at those steps, outside the jitted step. Process 0's only (is_writer)."""
    if step % params["save_summary_steps"] or not is_writer:
        return
    writer = eval_pictures.eval_writer(params["output_dir"])  # the scalars' (TrainingLog's)
    input_images.write_images(writer, data.host_rows(images, input_images.SHOWN), step)


def train(engine, max_steps):
    """Trains engine's state (trainer/jax/engine.py JaxEngine) from its step to max_steps; returns
    the final step. A stop signal is deferred to the end of the call under way, whose step is
    saved; the calls are planned from the multiples of save_checkpoints_steps."""
    params, is_writer = engine.params, engine.processes.is_writer
    step = engine.model.step_of(engine.state)
    log = training_log.TrainingLog(params, step, is_writer)
    with console.deferring_termination():
        for steps in training_log.plan_executions(step, max_steps, params):
            engine.state, history, done = run_call(
                engine.train_step, engine.state, engine.train_batches(), steps,
                lambda index, images, first=step: show_images(params, first + index + 1, images, is_writer))
            if not done:  # no full batch: trainer/run/rounds.py says so
                break
            step += done
            log.after_call(step, history)
            # Read once (it may come any time), and the same on every process.
            is_terminating = processes.agree_on_stop(engine.processes, step)
            if is_terminating or step % params["save_checkpoints_steps"] == 0 or step == max_steps or done < steps:
                engine.mirror.save(engine.state, step)
            if is_terminating or done < steps:
                break
        log.report(step)
    return step
