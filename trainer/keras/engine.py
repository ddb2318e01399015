"""The Keras engine's answers to trainer/run/driver.py: train, evaluate, export a TrainingModel.

Made once per command: the strategy (trainer/keras/strategy.py), the model and its
optimizers under its scope (trainer/keras/model.py), the checkpoint and its manager,
restored from the newest checkpoint of OUT (trainer/keras/checkpoint.py). The driver
then runs the same rounds, evaluations, early stopping and exports as for the
Estimator engine, and keeps the same run directory.

    .venv/bin/python -m trainer.task --engine keras --train_data_path 'DIR/train-*' \\
        --eval_data_path 'DIR/eval-*' --output_dir OUT
"""
import os

from trainer.keras import checkpoint as checkpoint_lib, evaluate as evaluate_lib
from trainer.keras import export as export_lib, model as model_lib, strategy as strategy_lib
from trainer.keras import predict as predict_lib, train as train_lib
from trainer.run import driver, predictions
from trainer.run.engine import Engine

EVAL_SUBDIR = "eval"  # OUT/eval: TensorBoard's eval scalars and pictures, where Estimator writes them


class KerasEngine(Engine):
    """trainer/run/engine.py's Engine, made of a TrainingModel under a tf.distribute strategy."""

    def __init__(self, params):
        self.params = params
        self.strategy = strategy_lib.make_strategy(params)
        self.model = model_lib.build_training_model(params, self.strategy)
        self.checkpoint = checkpoint_lib.make_checkpoint(self.model)
        self.manager = checkpoint_lib.make_manager(self.checkpoint, params)
        checkpoint_lib.restore_latest(self.checkpoint, params["output_dir"])
        self.eval_dir = os.path.join(params["output_dir"], EVAL_SUBDIR)
        self.eval_step = evaluate_lib.make_eval_step(self.model.network, self.strategy, params)
        self.train_function = train_lib.make_train_function(self.model, self.strategy)
        self._train_iterator = self._eval_dataset = None

    def train(self, max_steps):
        return train_lib.train(self.model, self.train_function, self.train_iterator(), self.manager,
                               self.params, max_steps)

    def train_iterator(self):
        """Made once: its shuffle buffer and cache live across rounds."""
        if self._train_iterator is None:
            with self.strategy.scope():
                self._train_iterator = train_lib.make_train_iterator(
                    self.params, self.strategy, start_step=int(self.model.step.numpy()))
        return self._train_iterator

    def eval_dataset(self):
        if self._eval_dataset is None:
            self._eval_dataset = evaluate_lib.make_eval_dataset(self.params, self.strategy)
        return self._eval_dataset

    def evaluate(self, checkpoint_path):
        return evaluate_lib.evaluate(self.model.network, self.eval_step, self.eval_dataset(),
                                     self.eval_dir, self.params, checkpoint_path)

    def export(self, checkpoint_path, staging_base):
        return export_lib.write_saved_model(self.model.network, self.params, checkpoint_path, staging_base)

    def predict(self, checkpoint_path):
        def predict_fn(jpeg_chunks, checkpoint):
            return predict_lib.predict_chunks(self.model, self.params, jpeg_chunks, checkpoint)
        return predictions.run_predict(predict_fn, self.params, checkpoint_path)


def run(params):
    """Runs params["mode"] with the Keras engine (trainer/run/driver.py)."""
    return driver.run(params, KerasEngine)
