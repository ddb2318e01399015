"""Run an exported SavedModel's serving signature in-process on batches of JPEG bytes.

Used by trainer/estimator/predict.py (--predict_export_dir), by the Beam ModelHandler of
serving/batch_predict.py and by bench/bench_batch_predict.py's baseline, so
all three call the export the same way. The class names come from the
export's own signature.LABELS_CONSTANT graph constant, so no labels file is needed.

    .venv/bin/python -m common.export_predictor work/demo/run/export/image_classifier/1500 a.jpg
"""
import dataclasses
import sys

import numpy as np
import tensorflow as tf

from common import export_versions, signature

LABELS_TENSOR = f"{signature.LABELS_CONSTANT}:0"


@dataclasses.dataclass
class LoadedExport:
    export_dir: str
    function: object  # the serving_default ConcreteFunction
    labels: list      # class names, index = class id
    loaded: object    # keeps the SavedModel's variables alive


def load_export(export_dir):
    """LoadedExport of export_dir (a version directory or an export base, see
    export_versions.resolve_export_dir); ValueError naming it if it lacks the contract."""
    export_dir, _ = export_versions.resolve_export_dir(export_dir)
    loaded = tf.saved_model.load(export_dir, tags=["serve"])
    if signature.SIGNATURE_DEFAULT not in loaded.signatures:
        raise ValueError(f"{export_dir} has no {signature.SIGNATURE_DEFAULT!r} signature "
                         f"(has {sorted(loaded.signatures)})")
    try:
        labels = [name.decode() for name in loaded.prune([], [LABELS_TENSOR])()[0].numpy()]
    except (KeyError, ValueError) as err:
        raise ValueError(f"{export_dir}: no {LABELS_TENSOR} constant: {err}") from err
    return LoadedExport(export_dir, loaded.signatures[signature.SIGNATURE_DEFAULT], labels, loaded)


def call_signature(function, tensors):
    """{output: tensor} of a loaded signature called with {input: tensor}.

    The flat call TF falls back to for an estimator export's signatures: the keyword call
    first fails a structured binding whose error text reprs every input tensor, a cost that
    grows with the batch (docs/benchmarks.md, "Measured figures behind choices in the code"). It is TF 2.15's
    private method (the lock pins TF), so a TensorFlow without it gets the keyword call."""
    flat_call = getattr(function, "_call_with_flat_signature", None)
    if flat_call is None:
        return function(**tensors)
    return flat_call((), tensors)


def predict_probabilities(export, jpegs):
    """float32 [len(jpegs), num_classes] probabilities for a batch of JPEG bytes."""
    inputs = tf.constant(np.asarray(list(jpegs), dtype=object), dtype=tf.string)
    outputs = call_signature(export.function, {signature.INPUT_IMAGE_BYTES: inputs})
    return outputs[signature.OUTPUT_PROBABILITIES].numpy()


def predict_in_batches(export, jpegs, batch_size):
    """Probabilities of every JPEG, batch_size at a time (bounded memory)."""
    jpegs = list(jpegs)
    parts = [predict_probabilities(export, jpegs[i:i + batch_size])
             for i in range(0, len(jpegs), batch_size)]
    return np.concatenate(parts) if parts else np.zeros([0, len(export.labels)], np.float32)


def main(argv):
    export = load_export(argv[1])
    jpegs = [tf.io.gfile.GFile(path, "rb").read() for path in argv[2:]]
    for path, row in zip(argv[2:], predict_probabilities(export, jpegs)):
        print(path, export.labels[int(np.argmax(row))], float(row.max()))


if __name__ == "__main__":
    main(sys.argv)
