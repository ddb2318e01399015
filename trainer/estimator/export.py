"""Export a trained TPUEstimator as a CPU-servable SavedModel with the serving contract.

serving_input_fn takes a batch of JPEG bytes under ``image_bytes`` (plus an
optional pass-through ``key``) and decodes them with common/image_ops.py's
evaluation preprocessing: the same function evaluation uses, so serving sees
what eval saw. The export's signatures are exactly common/signature.py's.

Estimator names signatures of alternative receivers "<receiver>:<output>", so
after export_saved_model the signature map is rewritten to the contract names
(rewrite_signatures) and checked (check_export).

    .venv/bin/python -m trainer.task --mode export --output_dir OUT   # export the latest checkpoint
    .venv/bin/saved_model_cli show --all --dir OUT/export/image_classifier/<version>
"""
import logging
import os

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from common import signature
from common import image_ops, record_schema

KEYED_RECEIVER = "keyed"  # Estimator prefixes this receiver's signatures with "keyed:"
STAGING_SUBDIR = "export_staging"  # exports are built here, then moved into place whole


def make_serving_input_fn(params):
    """serving_input_fn() -> ServingInputReceiver for tf.string [batch] JPEG bytes."""
    image_size = params["image_size"]

    def serving_input_fn():
        image_bytes = tf.compat.v1.placeholder(tf.string, [None], name=signature.INPUT_IMAGE_BYTES)
        # The key defaults to "" per image, so the unkeyed signatures need not feed it.
        key = tf.compat.v1.placeholder_with_default(
            tf.fill(tf.shape(image_bytes), ""), [None], name=signature.INPUT_KEY)
        images = image_ops.preprocess_batch_for_eval(image_bytes, image_size)
        if params["transpose_input"]:  # the layout model_fn expects (trainer/data/input.py)
            images = tf.transpose(images, [1, 2, 3, 0])
        return tf.estimator.export.ServingInputReceiver(
            {"image": images, signature.INPUT_KEY: key},
            {signature.INPUT_IMAGE_BYTES: image_bytes},
            receiver_tensors_alternatives={KEYED_RECEIVER: {
                signature.INPUT_IMAGE_BYTES: image_bytes, signature.INPUT_KEY: key}})
    return serving_input_fn


def contract_signature_names():
    """{contract name: the name Estimator gives that signature}."""
    return {signature.SIGNATURE_DEFAULT: signature.SIGNATURE_DEFAULT,
            signature.SIGNATURE_PREDICT: signature.SIGNATURE_PREDICT,
            signature.SIGNATURE_KEYED: f"{KEYED_RECEIVER}:{signature.SIGNATURE_KEYED}"}


def rewrite_signatures(export_dir):
    """Keeps exactly the contract's signatures (and SavedModel's internal "__" ones)."""
    path = os.path.join(export_dir, "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        signatures = meta_graph.signature_def
        kept = {name: signatures[name] for name in signatures if name.startswith("__")}
        for name, exported_name in contract_signature_names().items():
            if exported_name not in signatures:
                raise ValueError(f"{export_dir}: Estimator exported no {exported_name!r} signature "
                                 f"(has {sorted(signatures)})")
            kept[name] = signatures[exported_name]
        for name in list(signatures):
            del signatures[name]
        for name, signature_def in kept.items():
            signatures[name].CopyFrom(signature_def)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(saved_model.SerializeToString())


def graph_op_types(meta_graph):
    """Every op type in a meta graph, including those inside its function library."""
    types = {node.op for node in meta_graph.graph_def.node}
    for function in meta_graph.graph_def.library.function:
        types.update(node.op for node in function.node_def)
    return types


def check_export(export_dir):
    """Raises ValueError unless the export has exactly the contract's signatures and no TPU ops."""
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        names = {name for name in meta_graph.signature_def if not name.startswith("__")}
        if names != set(signature.SIGNATURES):
            raise ValueError(f"{export_dir}: signatures {sorted(names)}, "
                             f"the contract is {sorted(signature.SIGNATURES)}")
        tpu_ops = sorted(t for t in graph_op_types(meta_graph) if t.upper().startswith("TPU"))
        if tpu_ops:
            raise ValueError(f"{export_dir}: has TPU ops {tpu_ops}; a CPU server cannot load it")


def read_jpegs(file_pattern, count):
    """The first count JPEGs (bytes) of the TFRecords matching file_pattern."""
    files = sorted(tf.io.gfile.glob(file_pattern))
    jpegs = []
    for path in files:
        for record in tf.compat.v1.io.tf_record_iterator(path):
            jpegs.append(record_schema.decode_example_proto(record)[record_schema.ENCODED])
            if len(jpegs) >= count:
                return jpegs
    return jpegs


def write_warmup(export_dir, params):
    """Writes TF Serving warmup requests made of a few eval JPEGs, when eval data is given.

    Skipped with a warning when tensorflow-serving-api (the "serving" extra) is
    not installed, as on a training job: the export itself does not need it.
    """
    try:
        from common import warmup
    except ImportError as err:
        logging.warning("No warmup requests for %s: %s (pip install .[serving])", export_dir, err)
        return None
    jpegs = []
    if params["eval_data_path"] and params["num_warmup_images"]:
        jpegs = read_jpegs(params["eval_data_path"], params["num_warmup_images"])
    if not jpegs:
        logging.info("No warmup requests for %s: no eval JPEGs", export_dir)
        return None
    return warmup.write_warmup_requests(export_dir, jpegs, params["serving_model_name"],
                                        signature_names=signature.SIGNATURES)


def export_model(estimator, params, checkpoint_path, step, export_base):
    """Exports checkpoint_path to export_base/<serving_model_name>/<step>/; returns that path.

    Idempotent: an existing version directory is kept as it is. The export is
    built and checked in a staging directory, then moved into place whole, so
    TF Serving (which polls export_base) never sees a partial version.
    """
    final = os.path.join(export_base, params["serving_model_name"], str(step))
    if tf.io.gfile.exists(final):
        return final
    staging_base = os.path.join(params["output_dir"], STAGING_SUBDIR)
    if tf.io.gfile.exists(staging_base):  # left over by a killed export
        tf.io.gfile.rmtree(staging_base)
    staged = estimator.export_saved_model(
        staging_base, make_serving_input_fn(params), checkpoint_path=checkpoint_path)
    staged = staged.decode() if isinstance(staged, bytes) else staged
    rewrite_signatures(staged)
    check_export(staged)
    write_warmup(staged, params)
    tf.io.gfile.makedirs(os.path.dirname(final))
    tf.io.gfile.rename(staged, final)
    tf.io.gfile.rmtree(staging_base)
    logging.info("Exported step %d to %s", step, final)
    return final
