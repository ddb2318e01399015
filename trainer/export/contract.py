"""The serving graph both engines export: JPEG bytes in, the contract's outputs out.

Inputs are a batch of JPEG bytes under ``image_bytes`` and an optional
pass-through ``key`` (default "" per image, so the unkeyed signatures need not feed
it), decoded by common/image_ops.py's evaluation preprocessing: the function
evaluation uses, so serving sees what eval saw. Outputs are the probabilities, the
class ids and the class names, gathered from a graph constant
(signature.LABELS_CONSTANT) that makes an export usable without its labels.txt.
Every name is common/signature.py's; check_export holds an export to them.

    .venv/bin/python -c "from trainer.export import contract; contract.check_export('OUT/export/image_classifier/1500')"
"""
import os

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from common import image_ops, signature


def serving_inputs():
    """(image_bytes, key): tf.string [batch] placeholders of a TF1 serving graph."""
    image_bytes = tf.compat.v1.placeholder(tf.string, [None], name=signature.INPUT_IMAGE_BYTES)
    key = tf.compat.v1.placeholder_with_default(
        tf.fill(tf.shape(image_bytes), ""), [None], name=signature.INPUT_KEY)
    return image_bytes, key


def serving_images(image_bytes, params):
    """float32 [batch, S, S, 3] in [-1, 1]: the eval image path at params["image_size"]."""
    return image_ops.preprocess_batch_for_eval(image_bytes, params["image_size"])


def probabilities_and_ids(logits):
    """{probabilities: float32 [B, C], class_ids: int64 [B]}: the outputs that need no strings."""
    return {signature.OUTPUT_PROBABILITIES: tf.nn.softmax(tf.cast(logits, tf.float32)),
            signature.OUTPUT_CLASS_IDS: tf.argmax(logits, axis=1)}


def class_names(class_ids, labels):
    """tf.string [B]: labels[class_ids], from the LABELS_CONSTANT graph constant."""
    names = tf.constant(labels, tf.string, name=signature.LABELS_CONSTANT)
    return tf.gather(names, class_ids)


def prediction_outputs(logits, labels, key=None):
    """Every output of the contract: probabilities, class_ids, classes, and key when given."""
    outputs = probabilities_and_ids(logits)
    outputs[signature.OUTPUT_CLASSES] = class_names(outputs[signature.OUTPUT_CLASS_IDS], labels)
    if key is not None:
        outputs[signature.OUTPUT_KEY] = key
    return outputs


def signature_outputs(outputs):
    """{signature name: its outputs}: the keyed signature alone returns the key."""
    unkeyed = {name: tensor for name, tensor in outputs.items() if name != signature.OUTPUT_KEY}
    by_signature = {signature.SIGNATURE_DEFAULT: unkeyed, signature.SIGNATURE_PREDICT: unkeyed}
    if signature.OUTPUT_KEY in outputs:
        by_signature[signature.SIGNATURE_KEYED] = outputs
    return by_signature


def signature_inputs(image_bytes, key):
    """{signature name: its inputs}: the keyed signature alone takes the key."""
    unkeyed = {signature.INPUT_IMAGE_BYTES: image_bytes}
    return {signature.SIGNATURE_DEFAULT: unkeyed, signature.SIGNATURE_PREDICT: unkeyed,
            signature.SIGNATURE_KEYED: dict(unkeyed, **{signature.INPUT_KEY: key})}


def read_saved_model(export_dir):
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    return saved_model


def graph_op_types(meta_graph):
    """Every op type in a meta graph, including those inside its function library."""
    types = {node.op for node in meta_graph.graph_def.node}
    for function in meta_graph.graph_def.library.function:
        types.update(node.op for node in function.node_def)
    return types


def check_export(export_dir):
    """Raises ValueError unless the export has exactly the contract's signatures and no TPU ops."""
    for meta_graph in read_saved_model(export_dir).meta_graphs:
        names = {name for name in meta_graph.signature_def if not name.startswith("__")}
        if names != set(signature.SIGNATURES):
            raise ValueError(f"{export_dir}: signatures {sorted(names)}, "
                             f"the contract is {sorted(signature.SIGNATURES)}")
        tpu_ops = sorted(t for t in graph_op_types(meta_graph) if t.upper().startswith("TPU"))
        if tpu_ops:
            raise ValueError(f"{export_dir}: has TPU ops {tpu_ops}; a CPU server cannot load it")
