"""The JAX engine's answers to trainer/run/driver.py: train, evaluate, export and predict with Keras 3 on JAX.

Made once per command: Keras' DataParallel distribution over jax.devices() (every TPU chip
of the slice, or the CPU), the Keras 3 network and its optimizer (trainer/jax/model.py),
their state restored from the newest checkpoint of OUT (trainer/jax/checkpoint.py), the
jitted train step. The driver then runs the same rounds, evaluations, early stopping and
exports as for the other engines, and keeps the same run directory; the export is a
TensorFlow SavedModel of the tf-keras twin (trainer/jax/export.py).

On a multi-host slice every host runs the same command, one JAX process each
(trainer/jax/processes.py): all train and evaluate in step over the global batch, process 0
alone writes OUT (the lock, params.json, checkpoints, TensorBoard, eval records, exports) and
the others take its answers. --mode predict and continuous_eval run on one host.

    .venv-jax/bin/python -m trainer.task --engine jax --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT
"""
import os
import random

import jax
import keras

from trainer.jax import checkpoint as checkpoint_lib, data, evaluate as evaluate_lib
from trainer.jax import export as export_lib, model as model_lib, predict as predict_lib, processes
from trainer.jax import train as train_lib
from trainer.run import checkpoints, driver, predictions
from trainer.run.engine import Engine
from trainer.settings import checks

EVAL_SUBDIR = "eval"  # OUT/eval: TensorBoard's eval scalars and pictures, where Estimator writes them


class JaxEngine(Engine):
    """trainer/run/engine.py's Engine, made of a JaxModel whose state is sharded over jax.devices()."""

    def __init__(self, params, team=None):
        """team: the run's processes (processes.join_team), joined here when not given."""
        self.params = params
        self.processes = team or processes.join_team(params["use_tpu"])  # before any JAX computation
        check_devices(params, jax.device_count())
        keras.backend.clear_session()  # fresh layer names: checkpoints go by name
        seed = params["seed"] or shared_seed(self.processes)
        if seed:
            keras.utils.set_random_seed(seed)
        self.distribution = data.make_distribution()
        self.sharding = data.batch_sharding(self.distribution)
        self.model = model_lib.JaxModel(params)
        names = checkpoint_lib.tf_keras_names(self.model.network)
        checkpoint_lib.warm_start_network(self.model.network, params, names)  # before the averages copy it
        self.mirror = checkpoint_lib.CheckpointMirror(self.model, params, names, self.processes)
        self.state, _ = checkpoint_lib.restore_latest(
            self.mirror, data.replicated(self.model.initial_state(), self.sharding), params["output_dir"])
        self.eval_dir = os.path.join(params["output_dir"], EVAL_SUBDIR)
        self.train_step = train_lib.make_train_step(self.model)
        self.logits = jax.jit(self.model.logits, static_argnums=2)
        self._train_batches = self._eval_dataset = None

    def train(self, max_steps):
        return train_lib.train(self, max_steps)

    def train_batches(self):
        """Made once: its shuffle buffer and cache live across rounds."""
        if self._train_batches is None:
            self._train_batches = train_lib.make_train_batches(
                self.params, self.sharding, start_step=self.model.step_of(self.state))
        return self._train_batches

    def eval_dataset(self):
        if self._eval_dataset is None:
            self._eval_dataset = evaluate_lib.make_eval_dataset(self.params)
        return self._eval_dataset

    def evaluate(self, checkpoint_path):
        # The step before the restore: beside a trainer, keep_checkpoint_max may delete the files.
        return evaluate_lib.evaluate(self, checkpoint_path, checkpoints.step_of(checkpoint_path))

    def export(self, checkpoint_path, staging_base):
        return export_lib.write_saved_model(self.params, checkpoint_path, staging_base)

    def predict(self, checkpoint_path):
        def predict_fn(jpeg_chunks, checkpoint):
            return predict_lib.predict_chunks(self, jpeg_chunks, checkpoint)
        return predictions.run_predict(predict_fn, self.params, checkpoint_path)


def shared_seed(team):
    """An unseeded run's seed of the network's initial values when it is several processes:
    process 0's draw, since each process builds the replicated variables and they must agree.
    None for one process (unseeded, as the other engines)."""
    if jax.process_count() == 1:
        return None
    return team.from_writer("seed", lambda: random.randrange(1, 2 ** 31))


def check_devices(params, devices):
    """ConfigError unless every global batch splits evenly across the devices."""
    for key in ("train_batch_size", "eval_batch_size"):
        if params[key] % devices:
            raise checks.ConfigError(f"{key}={params[key]} must be divisible by the {devices} JAX "
                                     f"devices: each gets an equal share")


def run(params):
    """Runs params["mode"] with the JAX engine (trainer/run/driver.py), over the run's processes:
    joined first, so that the driver's writer (process 0) is known before the lock."""
    team = processes.join_team(params["use_tpu"])
    with processes.leaving_together(team):
        check_modes_of_hosts(params, jax.process_count())
        return driver.run(params, lambda checked: JaxEngine(checked, team), team)


ONE_HOST_MODES = ("predict", "continuous_eval")  # their input and their writes are one process's


def check_modes_of_hosts(params, count):
    """ProcessesError when a mode that runs on one host is started on several (every process
    refuses alike, before anything is read or written)."""
    if count > 1 and params["mode"] in ONE_HOST_MODES:
        raise processes.ProcessesError(
            f"--mode {params['mode']} runs in one process, not {count}: start it on one host "
            f"(without JAX_NUM_PROCESSES), beside the run's OUT")
