"""The JAX engine's predict_fn for --mode predict: the jitted network on the checkpoint's weights.

trainer/run/predictions.py reads and checks the inputs and writes the records, as for
every engine; the images come through the evaluation image path in whole batches of
predict_batch_size (trainer/keras/predict.py make_dataset: the last topped up with blank
images, their rows dropped), and the network holds the checkpoint's weights, its moving
averages when kept, as evaluation and export read them.

    .venv-jax/bin/python -m trainer.task --engine jax --mode predict --output_dir OUT \\
        --predict_input images.csv
"""
import jax
import numpy as np

from trainer.keras import predict as keras_predict


def predict_chunks(engine, jpeg_chunks, checkpoint_path):
    """Per chunk of jpeg_chunks, in order: float32 [len(chunk), num_classes] (None for an empty
    chunk); the checkpoint is read once for the run."""
    state = engine.mirror.restore(checkpoint_path, engine.state)
    use_averages = bool(engine.params["moving_average_decay"])
    for jpegs in jpeg_chunks:
        yield probabilities(engine, state, jpegs, use_averages) if jpegs else None


def probabilities(engine, state, jpegs, use_averages):
    """float32 [len(jpegs), num_classes]: each image once, in input order."""
    rows = [np.asarray(jax.nn.softmax(engine.logits(state, images, use_averages)))
            for images in keras_predict.make_dataset(jpegs, engine.params).as_numpy_iterator()]
    return np.concatenate(rows)[:len(jpegs)]
