"""An export put in place whole: built in a staging directory, checked, given its warm-up requests, moved.

TF Serving polls OUT/export/<serving_model_name>/ and loads the highest numbered
version it finds, so a version directory must never be seen half written: each
engine writes its SavedModel into a staging folder beside the version's place
(write_saved_model; common/publish.py), then the contract is checked
(contract.check_export), TF Serving's warm-up requests are added (a few eval JPEGs,
common/warmup.py) and the SavedModel is renamed into place.
A version below one already there is not what TF Serving serves: outranking_version
names the one it serves instead (the driver says so in one line).

    .venv/bin/python -m trainer.task --mode export --output_dir OUT [--engine keras]
"""
import logging
import os

import tensorflow as tf

from common import export_versions, publish, record_schema, signature
from trainer.export import contract

def read_jpegs(file_pattern, count):
    """The first count JPEGs (bytes) of the TFRecords matching file_pattern."""
    jpegs = []
    for path in sorted(tf.io.gfile.glob(file_pattern)):
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


def export_into_place(params, step, export_base, write_saved_model):
    """export_base/<serving_model_name>/<step>/ from write_saved_model(staging_base) -> the
    SavedModel directory it wrote there; returns the final path.

    Idempotent: an existing version directory is kept as it is.
    """
    final = os.path.join(export_base, params["serving_model_name"], str(step))
    if tf.io.gfile.exists(final):
        return final
    with publish.folder(final, clear_leftovers=True) as stage:
        stage.content = write_saved_model(stage.path)  # STAGE/<timestamp>/, the engine's name
        contract.check_export(stage.content)
        write_warmup(stage.content, params)
    logging.info("Exported step %d to %s", step, final)
    return final


def outranking_version(export_path):
    """The version TF Serving serves from export_path's model directory when it is not
    export_path's own (a higher one is there: an earlier export, e.g. of a checkpoint the run
    has since lost), else None."""
    model_base, name = os.path.split(export_path.rstrip("/"))
    served = export_versions.latest_version(model_base)
    if served is None or not export_versions.is_version_name(name) or served <= int(name):
        return None
    return served


def copy_into_place(source, target):
    """Copies an export directory to target (kept if it exists), whole: TF Serving polls target's
    parent, so the copy is published (common/publish.py) (the best export copied to OUT/export/
    when a run stops early, trainer/run/rounds.py)."""
    if tf.io.gfile.exists(target):
        return target
    with publish.folder(target, clear_leftovers=True) as stage:
        for directory, _, files in tf.io.gfile.walk(source):
            relative = directory[len(source):].strip("/")  # walk joins onto source; keeps gs://
            tf.io.gfile.makedirs(os.path.join(stage.path, relative))
            for name in files:
                tf.io.gfile.copy(os.path.join(directory, name), os.path.join(stage.path, relative, name))
    return target
