"""The TFLite directory: the two models, their metadata and their check, written aside and renamed.

    TFLITE_DIR/model.tflite          float32 [batch, S, S, 3] in -> float32 probabilities [batch, C]
    TFLITE_DIR/model_int8.tflite     int8 in -> int8 probabilities (full-integer quantization)
    TFLITE_DIR/tflite_metadata.json  the image preprocessing the models need, each model's input
                                     and output dtype and quantization, the labels, the source export or checkpoint
    TFLITE_DIR/tflite_check.json     top-1 agreement with the export and accuracy on eval records

The directory appears whole or not at all: written beside its place, then renamed (common/publish.py).

    .venv/bin/python -m trainer.export_tflite --output_dir OUT   # -> OUT/tflite/<model>/<version>/
"""
import errno
import json
import os

import tensorflow as tf

from common import image_ops, publish
from common.user_errors import UserError
from trainer.export import tflite_check

FLOAT32_FILE = "model.tflite"
INT8_FILE = "model_int8.tflite"
METADATA_FILE = "tflite_metadata.json"
CHECK_FILE = "tflite_check.json"


def tensor_metadata(detail):
    """dtype, shape ([-1, ...] for the batch) and, for an integer tensor, its quantization."""
    described = {"name": detail["name"], "dtype": detail["dtype"].__name__,
                 "shape": [int(n) for n in detail["shape_signature"]]}
    scale, zero_point = detail["quantization"]
    if scale:
        described["quantization"] = {
            "scale": float(scale), "zero_point": int(zero_point),
            "real_value": "scale * (q - zero_point); q = round(x / scale) + zero_point, clipped"}
    return described


def model_metadata(content):
    """{input, output} of a TFLite model, read from the model itself by the interpreter."""
    interpreter = tflite_check.make_interpreter(content)
    return {"input": tensor_metadata(interpreter.get_input_details()[0]),
            "output": tensor_metadata(interpreter.get_output_details()[0])}


def build_metadata(cut, models, source):
    """tflite_metadata.json's content. source: {export_dir, version} or {checkpoint, step,
    engine}, and calibration."""
    return {
        "preprocessing": image_ops.describe_eval_preprocessing(cut.image_size),
        "models": {name: model_metadata(content) for name, content in models.items()},
        "output": "probabilities of each class, index = class id, in the order of labels",
        "labels": cut.labels,
        "converter": f"tf.compat.v1.lite.TFLiteConverter (TensorFlow {tf.__version__})",
        **source,
    }


def write_tflite_dir(tflite_dir, models, metadata, check):
    """tflite_dir/{models, METADATA_FILE, CHECK_FILE}, published whole (common/publish.py)."""
    try:
        with publish.folder(tflite_dir, clear_leftovers=True) as stage:
            write_files(stage.path, models, metadata, check)
    except (tf.errors.ResourceExhaustedError, OSError) as err:
        if isinstance(err, OSError) and err.errno != errno.ENOSPC:
            raise
        raise UserError(f"no space left on the device of {tflite_dir}: nothing was written; free "
                        "space (or pass another --tflite_dir) and run the same command again") from None
    return tflite_dir


def write_files(folder, models, metadata, check):
    for name, content in models.items():
        with tf.io.gfile.GFile(os.path.join(folder, name), "wb") as f:
            f.write(content)
    for name, value in ((METADATA_FILE, metadata), (CHECK_FILE, check)):
        with tf.io.gfile.GFile(os.path.join(folder, name), "w") as f:
            f.write(json.dumps(value, indent=2) + "\n")
