"""An export's network as TFLite models: float32, and int8 by full-integer post-training quantization.

TFLite cannot take the serving signature's JPEG bytes (tf.string, a decode in a loop), so what
is converted is the part of the export's own serving graph after the eval image path: from
the tensor common/image_ops.py's preprocess_batch_for_eval produces (float32 [batch, S, S, 3]
in [-1, 1]) to the signature's probabilities. The same graph and weights TF Serving runs, cut
where the image is ready, so the numbers are the export's; both engines' exports are TF1
graphs with that cut in them (trainer/export/contract.py). The converter is TensorFlow's own,
tf.compat.v1.lite.TFLiteConverter.from_session (TensorFlow 2.15 and 2.20 alike), on the
frozen cut.

    .venv/bin/python -m trainer.export_tflite --output_dir OUT
"""
import dataclasses
import os

import numpy as np
import tensorflow as tf

from google.protobuf.message import DecodeError

from common import chunks, dataset_files, export_predictor, signature
from common.user_errors import UserError
from trainer.export import tflite_check, tflite_files

INPUT_NAME = "images"  # the TFLite models' input: float32 (or int8) [batch, S, S, 3]


class NotConvertible(UserError):
    """An export whose serving graph lacks what the conversion cuts it at."""


@dataclasses.dataclass
class ServingCut:
    graph_def: object   # the export's serving graph, its variables frozen to constants
    images_name: str    # the preprocessed image tensor: float32 [batch, S, S, 3]
    probabilities_name: str
    image_size: int
    labels: list


def signature_tensor_names(meta_graph, export_dir):
    """(image_bytes tensor name, probabilities tensor name) of the serving_default signature."""
    signature_def = meta_graph.signature_def.get(signature.SIGNATURE_DEFAULT)
    if (signature_def is None or signature.INPUT_IMAGE_BYTES not in signature_def.inputs
            or signature.OUTPUT_PROBABILITIES not in signature_def.outputs):
        raise NotConvertible(
            f"{export_dir} has no {signature.SIGNATURE_DEFAULT!r} signature taking "
            f"{signature.INPUT_IMAGE_BYTES!r} and returning {signature.OUTPUT_PROBABILITIES!r}; "
            "pass an export written by trainer.task")
    return (signature_def.inputs[signature.INPUT_IMAGE_BYTES].name,
            signature_def.outputs[signature.OUTPUT_PROBABILITIES].name)


def downstream_ops(tensor):
    """Every op computed from tensor, in the graph's (creation, so topological) order."""
    seen, frontier = {tensor.op}, [tensor.op]
    while frontier:
        frontier = [consumer for op in frontier for output in op.outputs
                    for consumer in output.consumers() if consumer not in seen]
        seen.update(frontier)
    return [op for op in tensor.graph.get_operations() if op in seen]


def find_images_tensor(image_bytes, export_dir):
    """The first float32 [batch, S, S, 3] tensor computed from the JPEG bytes: the output of
    the eval image path (inside its map every tensor is one image, rank 3)."""
    for op in downstream_ops(image_bytes):
        for tensor in op.outputs:
            shape = tensor.shape
            if (tensor.dtype == tf.float32 and shape.rank == 4 and shape[3] == 3
                    and shape[1] is not None and shape[1] == shape[2]):
                return tensor
    raise NotConvertible(f"{export_dir}: no float32 [batch, S, S, 3] image tensor after "
                         f"{image_bytes.name}; pass an export written by trainer.task")


def read_serving_cut(export_dir):
    """ServingCut of an export version directory (its graph loaded in a TF1 session)."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        meta_graph = load_export(session, export_dir)
        bytes_name, probabilities_name = signature_tensor_names(meta_graph, export_dir)
        images = find_images_tensor(graph.get_tensor_by_name(bytes_name), export_dir)
        labels = [name.decode() for name in session.run(export_predictor.LABELS_TENSOR)]
        frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
            session, graph.as_graph_def(), [probabilities_name.split(":")[0]])
    return ServingCut(frozen, images.name, probabilities_name, int(images.shape[1]), labels)


def load_export(session, export_dir):
    """The export's serving MetaGraph loaded into session; NotConvertible in one line when its
    saved_model.pb or variables/ are damaged, cut short or missing."""
    try:
        return tf.compat.v1.saved_model.load(session, [tf.saved_model.SERVING], export_dir)
    except (tf.errors.OpError, DecodeError, OSError, RuntimeError, ValueError) as err:
        reason = (getattr(err, "message", None) or str(err) or type(err).__name__).strip().splitlines()[0]
        raise NotConvertible(f"{export_dir} cannot be loaded as a SavedModel ({reason[:200]}); pass an "
                             "intact export, or convert a checkpoint of the run (--checkpoint latest)") from None


def check_eval_labels(eval_paths, labels):
    """NotConvertible when the eval records are not of the model's classes: a label id past its
    last class, or a labels.txt beside them naming other classes (calibrating and checking on
    another dataset's images would write models measured on the wrong data)."""
    beside = os.path.join(os.path.dirname(eval_paths[0]), dataset_files.LABELS_FILE)
    if tf.io.gfile.exists(beside):
        with tf.io.gfile.GFile(beside) as f:
            named = dataset_files.parse_labels(f.read(), beside)
        if named != labels:
            raise NotConvertible(f"the eval records' {beside} names {len(named)} classes "
                                 f"({', '.join(named[:5])}{', ...' if len(named) > 5 else ''}) and the model "
                                 f"{len(labels)} ({', '.join(labels[:5])}{', ...' if len(labels) > 5 else ''}); "
                                 "pass --eval_data_path of the dataset the model was trained on")
    top = max((label for _, label in tflite_check.read_eval_examples(eval_paths)), default=-1)
    if top >= len(labels):
        raise NotConvertible(f"the eval records hold label id {top}, but the model has {len(labels)} "
                             "classes; pass --eval_data_path of the dataset the model was trained on")


def convert(cut, calibration_images=None):
    """TFLite flatbuffer bytes of cut: float32, or, given calibration images (float32
    [n, S, S, 3], the eval image path's output), int8 in and out with int8 weights."""
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [None, cut.image_size, cut.image_size, 3],
                                          name=INPUT_NAME)
        (probabilities,) = tf.graph_util.import_graph_def(
            cut.graph_def, input_map={cut.images_name: images},
            return_elements=[cut.probabilities_name], name="")
        with tf.compat.v1.Session(graph=graph) as session:
            converter = tf.compat.v1.lite.TFLiteConverter.from_session(
                session, [images], [probabilities])
            if calibration_images is not None:
                quantize_fully(converter, calibration_images)
            return converter.convert()


def quantize_fully(converter, calibration_images):
    """Full-integer post-training quantization: every op int8, the input and output too, the
    activation ranges measured on calibration_images one at a time (as the model will run)."""
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([image[np.newaxis]] for image in calibration_images)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8


def calibration_images(eval_paths, split, image_size):
    """float32 [split.calibrating, S, S, 3]: the eval images split calibrates on (an
    tflite_check.EvalSplit), through the eval image path."""
    jpegs = [jpeg for jpeg, _ in tflite_check.read_eval_examples(eval_paths, split.calibrates)]
    return np.concatenate([tflite_check.preprocess(batch, image_size)
                           for batch in chunks.split_into_chunks(jpegs, tflite_check.CHECK_BATCH)])


def export_tflite(export_dir, eval_paths, tflite_dir, split, source):
    """Converts export_dir to both TFLite models (int8 calibrated on split's calibration part),
    checks them on the other eval records and writes tflite_dir whole; returns the check
    ({"images": n checked, ...}, per model)."""
    cut = read_serving_cut(export_dir)
    check_eval_labels(eval_paths, cut.labels)
    calibration = calibration_images(eval_paths, split, cut.image_size)
    models = {tflite_files.FLOAT32_FILE: convert(cut),
              tflite_files.INT8_FILE: convert(cut, calibration)}
    check = tflite_check.check_models(export_dir, models, eval_paths, cut.image_size, split)
    check["float32_agreement_goal"] = tflite_check.FLOAT32_AGREEMENT_GOAL
    source = dict(source, calibration=dict(split.describe(), eval_files=list(eval_paths)))
    metadata = tflite_files.build_metadata(cut, models, source)
    tflite_files.write_tflite_dir(tflite_dir, models, metadata, check)
    return check
