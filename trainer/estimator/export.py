"""Export a trained TPUEstimator as a CPU-servable SavedModel with the serving contract.

serving_input_fn takes a batch of JPEG bytes under ``image_bytes`` (plus an optional
pass-through ``key``) and decodes them with the evaluation preprocessing
(trainer/export/contract.py, shared with the Keras engine): serving sees what eval
saw. model_fn's PREDICT spec gives the contract's outputs.

Estimator names signatures of alternative receivers "<receiver>:<output>", so
after export_saved_model the signature map is rewritten to the contract names
(rewrite_signatures); trainer/export/staging.py checks the result, adds the warm-up
requests and moves it into place.

    .venv/bin/python -m trainer.task --mode export --output_dir OUT   # export the latest checkpoint
    .venv/bin/saved_model_cli show --all --dir OUT/export/image_classifier/<version>
"""
import os

import tensorflow as tf

from common import signature
from trainer.export import contract

KEYED_RECEIVER = "keyed"  # Estimator prefixes this receiver's signatures with "keyed:"


def make_serving_input_fn(params):
    """serving_input_fn() -> ServingInputReceiver for tf.string [batch] JPEG bytes."""
    def serving_input_fn():
        image_bytes, key = contract.serving_inputs()
        images = contract.serving_images(image_bytes, params)
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
    saved_model = contract.read_saved_model(export_dir)
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
    with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "wb") as f:
        f.write(saved_model.SerializeToString())


def write_saved_model(estimator, params, checkpoint_path, staging_base):
    """The SavedModel of checkpoint_path under staging_base, with the contract's signature names."""
    staged = estimator.export_saved_model(
        staging_base, make_serving_input_fn(params), checkpoint_path=checkpoint_path)
    staged = staged.decode() if isinstance(staged, bytes) else staged
    rewrite_signatures(staged)
    return staged
