"""The Keras engine's export: the Estimator engine's SavedModel in every respect a client sees.

The checkpoint's weights (their moving averages, when kept) are read into the network
and its forward pass is traced and frozen (tf.function, then its variables made
constants); the serving graph is then built as Estimator builds it, in a TF1 graph: JPEG
bytes in, the eval image path, the frozen network, the contract's outputs with the
labels constant (trainer/export/contract.py, shared with the Estimator engine), three
predict signatures written by a SavedModelBuilder. So the signature names, inputs,
outputs, dtypes and shapes, and the `label_names:0` tensor common/export_predictor.py
reads, are the Estimator engine's, and TF Serving, the stand-in, serving.client, batch
prediction and `gcloud ai-platform local predict` serve it unchanged.

Why not tf.saved_model.save of a tf.function: its labels constant would live inside a
function, where the serving tools that read `label_names:0` do not look. Why frozen,
not the network built again in a TF1 graph: Keras 2 builds a model in a graph only by
turning every model of the process into a graph-mode one (keras/src/utils/version_utils.py),
and the engine's own network must go on training. (Frozen: the export holds constants,
no variables; TF Serving loads either.)

    .venv/bin/python -m trainer.task --engine keras --mode export --output_dir OUT
"""
import os
import time

import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

from common import console
from trainer.export import contract
from trainer.keras import checkpoint as checkpoint_lib

NETWORK_SCOPE = "network"  # the frozen network's ops in the serving graph: network/...


def freeze_network(network, params):
    """The network's forward pass (eval mode) as a GraphDef with its weights as constants:
    (graph_def, input tensor name, logits tensor name)."""
    size = params["image_size"]
    forward = tf.function(lambda images: network(images, training=False)).get_concrete_function(
        tf.TensorSpec([None, size, size, 3], tf.float32, name="images"))
    with console.native_lines_muted():  # TF 2.20's grappler logs through absl, past TF_CPP_MIN_LOG_LEVEL
        frozen = convert_to_constants.convert_variables_to_constants_v2(forward)
    return frozen.graph.as_graph_def(), frozen.inputs[0].name, frozen.outputs[0].name


def signature_defs(image_bytes, key, outputs):
    """{signature name: SignatureDef}: the contract's three predict signatures."""
    inputs = contract.signature_inputs(image_bytes, key)
    return {name: tf.compat.v1.saved_model.predict_signature_def(inputs[name], signature_outputs)
            for name, signature_outputs in contract.signature_outputs(outputs).items()}


def write_saved_model(network, params, checkpoint_path, staging_base):
    """Writes the SavedModel of checkpoint_path to staging_base/<timestamp>/; returns that path."""
    use_averages = bool(params["moving_average_decay"])
    with checkpoint_lib.weights_of(network, checkpoint_path, use_averages):
        graph_def, input_name, logits_name = freeze_network(network, params)
    export_dir = os.path.join(staging_base, str(int(time.time())))
    graph = tf.Graph()
    with graph.as_default():
        image_bytes, key = contract.serving_inputs()
        images = contract.serving_images(image_bytes, params)
        (logits,) = tf.graph_util.import_graph_def(graph_def, input_map={input_name: images},
                                                   return_elements=[logits_name], name=NETWORK_SCOPE)
        outputs = contract.prediction_outputs(logits, params["labels"], key)
        with tf.compat.v1.Session(graph=graph) as session:
            builder = tf.compat.v1.saved_model.Builder(export_dir)
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.SERVING], strip_default_attrs=True,
                signature_def_map=signature_defs(image_bytes, key, outputs))
            builder.save()
    return export_dir
