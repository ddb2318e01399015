"""Serving fixtures: a tiny SavedModel with the serving contract's signatures, and a stand-in
server on free loopback ports that is always stopped.

The model decodes JPEGs with the same ops as a real export (decode_jpeg, resize, float),
then a fixed linear layer and softmax; the label strings live in the graph.

    .venv/bin/python -m pytest tests/serving
"""
import io

import numpy as np
import pytest
from PIL import Image

LABELS = ("cat", "dog", "fish")
IMAGE_SIZE = 8  # the fixture model resizes every image to [8, 8, 3]


def build_tiny_classifier(seed=0):
    """A tf.Module with the contract's three signatures (see common/signature.py)."""
    import tensorflow as tf
    from common import signature as s

    rng = np.random.default_rng(seed)
    features = IMAGE_SIZE * IMAGE_SIZE * 3

    class TinyClassifier(tf.Module):
        def __init__(self):
            super().__init__()
            self.weights = tf.constant(rng.normal(0, 0.3, (features, len(LABELS))), tf.float32)
            self.bias = tf.constant(rng.normal(0, 0.1, (len(LABELS),)), tf.float32)
            self.labels = tf.constant(LABELS)

        def classify(self, image_bytes):
            def decode(jpeg):  # [h, w, 3] uint8 -> [features] float32 in [0, 1]
                image = tf.image.convert_image_dtype(tf.io.decode_jpeg(jpeg, channels=3), tf.float32)
                return tf.reshape(tf.image.resize(image, [IMAGE_SIZE, IMAGE_SIZE]), [features])
            pixels = tf.map_fn(decode, image_bytes, fn_output_signature=tf.float32)
            probabilities = tf.nn.softmax(tf.matmul(pixels, self.weights) + self.bias)
            class_ids = tf.argmax(probabilities, axis=1)  # int64
            return {s.OUTPUT_PROBABILITIES: probabilities, s.OUTPUT_CLASS_IDS: class_ids,
                    s.OUTPUT_CLASSES: tf.gather(self.labels, class_ids)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=s.INPUT_IMAGE_BYTES)])
        def serve(self, image_bytes):
            return self.classify(image_bytes)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=s.INPUT_IMAGE_BYTES),
                                      tf.TensorSpec([None], tf.string, name=s.INPUT_KEY)])
        def serve_keyed(self, image_bytes, key):
            outputs = self.classify(image_bytes)
            outputs[s.OUTPUT_KEY] = tf.identity(key)
            return outputs

    return TinyClassifier()


def save_tiny_classifier(export_dir, seed=0, warmup_jpegs=()):
    """Saves the fixture model to export_dir (a version directory); returns export_dir."""
    import tensorflow as tf
    from common import signature as s, warmup

    module = build_tiny_classifier(seed)
    tf.saved_model.save(module, str(export_dir), signatures={
        s.SIGNATURE_DEFAULT: module.serve, s.SIGNATURE_PREDICT: module.serve,
        s.SIGNATURE_KEYED: module.serve_keyed})
    if warmup_jpegs:
        warmup.write_warmup_requests(str(export_dir), list(warmup_jpegs))
    return export_dir


def jpeg_bytes(seed, size=24):
    """A deterministic structured JPEG (session-scoped fixtures cannot use make_jpeg)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size]
    planes = [(x * (7 + c + seed) + y * (3 + 2 * c) + rng.integers(0, 60, (size, size))) % 256
              for c in range(3)]
    buffer = io.BytesIO()
    Image.fromarray(np.stack(planes, -1).astype(np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def sample_jpegs():
    """Eight distinct JPEGs, shared by the session's serving tests."""
    return [jpeg_bytes(seed) for seed in range(8)]


@pytest.fixture(scope="session")
def tiny_export_base(tmp_path_factory, sample_jpegs):
    """OUT/export/<model_name>/ holding version 1 of the fixture model, with warmup requests."""
    base = tmp_path_factory.mktemp("export") / "image_classifier"
    save_tiny_classifier(base / "1", seed=0, warmup_jpegs=sample_jpegs[:2])
    return base


@pytest.fixture(scope="module")
def standin(tiny_export_base):
    """A running stand-in server on free 127.0.0.1 ports, stopped after the module."""
    from serving.standin import server
    running = server.start_server("image_classifier", str(tiny_export_base), "127.0.0.1",
                                  rest_api_port=0, port=0, poll_seconds=0.2)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def save_tiny_model():
    """save_tiny_model(export_dir, seed=0, warmup_jpegs=()) writes the fixture SavedModel."""
    return save_tiny_classifier


def rest_call(server, method, path, body=None, headers=None, timeout=60):
    """(HTTP status, parsed JSON) from a running stand-in over a fresh loopback connection;
    body: a dict or list (sent as JSON), bytes, or None."""
    import http.client
    import json
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def b64(data):
    """TF Serving's JSON form of a bytes value."""
    import base64
    return {"b64": base64.b64encode(data).decode()}


def wait_for(predicate, seconds=30):
    """True once predicate() is, polling every 50 ms; False after `seconds`, when every
    thread's stack goes to stderr (the failure's report shows where a server thread was)."""
    import faulthandler
    import sys
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    return False
