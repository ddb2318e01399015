"""An export written by TensorFlow 2.20 (.venv-keras) served by TensorFlow 2.15 (.venv).

The Keras engine (the JAX engine in .venv-jax: its export is the tf-keras twin's, written by
TensorFlow 2.20 as well) exports a tiny run here, in this process's TensorFlow; then .venv's Python,
TensorFlow 2.15, (a) loads it as TF Serving does (the v1 loader in a session: the meta graph
imported, variables restored, no Python objects) and runs serving_default, and (b) serves it
with `python -m serving.launch --server standin` over REST and gRPC. Both must answer the
same classes and, to 1e-5, the same probabilities as the export loaded here. TensorFlow
promises no forward compatibility (tensorflow.org/guide/versions), so this is a measurement
of this model's ops, not a guarantee: docs/serving.md, "An export from TensorFlow 2.20 on
TF Serving 2.15".

It runs where the export's TensorFlow is newer than .venv's: in .venv-keras and .venv-jax (make
test-keras and test-jax, which CI runs after make test has built .venv); elsewhere it is
skipped, saying why.

    .venv-keras/bin/python -m pytest tests/serving/test_cross_version_export.py
    .venv-jax/bin/python -m pytest tests/serving/test_cross_version_export.py
"""
import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from common import signature
from serving import client as client_lib
from serving.grpc_client import GrpcClient
from serving.rest_client import RestClient
from tests.conftest import free_ports
from tests.engines import HAS_JAX
from tests.serving.conftest import jpeg_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
OLDER_PYTHON = ROOT / ".venv" / "bin" / "python"  # TensorFlow 2.15: requirements.lock
TOLERANCE = 1e-5
LABELS = ("cat", "dog", "fish")
ENGINE = "jax" if HAS_JAX else "keras"  # the engine of this environment whose export is TF 2.20's


def tensorflow_of(python):
    """The TensorFlow version installed for python, or None when python is not there."""
    if not python.exists():
        return None
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('tensorflow'))"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def minor(version):
    return tuple(int(part) for part in version.split(".")[:2])


OLDER = tensorflow_of(OLDER_PYTHON)
pytestmark = [
    pytest.mark.skipif(OLDER is None, reason=f"needs {OLDER_PYTHON} (TensorFlow 2.15, make test "
                                             "builds it) beside this environment"),
    pytest.mark.skipif(OLDER is not None and minor(OLDER) >= minor(tf.__version__),
                       reason=f"the export must come from a TensorFlow newer than .venv's {OLDER}: "
                              "runs in .venv-keras (make test-keras)"),
]

# Run by .venv's Python: argv[1] the version directory, argv[2] a folder of JPEGs; prints JSON.
LOAD_AS_TF_SERVING = """
import json, os, sys
import tensorflow as tf
export_dir, jpegs = sys.argv[1], sorted(os.listdir(sys.argv[2]))
images = [open(os.path.join(sys.argv[2], name), "rb").read() for name in jpegs]
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta_graph = tf.compat.v1.saved_model.load(session, ["serve"], export_dir)
    signature = meta_graph.signature_def["serving_default"]
    outputs = session.run({name: info.name for name, info in signature.outputs.items()},
                          {signature.inputs["image_bytes"].name: images})
print(json.dumps({"tensorflow": tf.__version__,
                  "probabilities": outputs["probabilities"].tolist(),
                  "class_ids": outputs["class_ids"].tolist(),
                  "classes": [c.decode() for c in outputs["classes"]]}))
"""


@pytest.fixture(scope="module")
def keras_export(tmp_path_factory):
    """ENGINE's export of a tiny run, written by this process's TensorFlow."""
    from tests.conftest import write_dataset
    from tests.trainer.conftest import TINY_FLAGS, as_argv
    from trainer import task
    root = tmp_path_factory.mktemp("cross_version")
    data = write_dataset(root / "data", {"train": 24, "eval": 11}, LABELS, size=20)
    flags = dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                 output_dir=root / "run", engine=ENGINE)
    return pathlib.Path(task.main(as_argv(flags)))


@pytest.fixture(scope="module")
def jpegs():
    return [jpeg_bytes(seed, size=16 + 5 * seed) for seed in range(6)]  # 16 to 41 pixels a side


@pytest.fixture(scope="module")
def answers_here(keras_export, jpegs):
    """serving_default's outputs with the export loaded in this process (TensorFlow 2.20)."""
    outputs = tf.saved_model.load(str(keras_export)).signatures[signature.SIGNATURE_DEFAULT](
        image_bytes=tf.constant(jpegs))
    return {name: value.numpy() for name, value in outputs.items()}


def check_same_answers(answers, reference):
    assert np.abs(np.asarray(answers["probabilities"]) - reference["probabilities"]).max() <= TOLERANCE
    assert list(np.asarray(answers["class_ids"]).ravel()) == list(reference["class_ids"])
    assert [c.decode() if isinstance(c, bytes) else c for c in np.asarray(answers["classes"]).ravel()] \
        == [c.decode() for c in reference["classes"]]


def test_the_export_records_this_tensorflow(keras_export):
    from serving import export_tensorflow
    assert export_tensorflow.read_tensorflow_version(str(keras_export)) == tf.__version__
    result = subprocess.run([sys.executable, "-m", "serving.launch", "--model_base_path",
                             str(keras_export.parent), "--server", "docker", "--dry_run"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"serving.launch: the export (version {keras_export.name}) was written by TensorFlow "
        f"{tf.__version__}: image tensorflow/serving:2.20.0")


def test_tensorflow_2_15_loads_it_as_tf_serving_does_and_answers_the_same(keras_export, jpegs,
                                                                         answers_here, tmp_path):
    for i, jpeg in enumerate(jpegs):
        (tmp_path / f"{i}.jpg").write_bytes(jpeg)
    result = subprocess.run([str(OLDER_PYTHON), "-c", LOAD_AS_TF_SERVING, str(keras_export), str(tmp_path)],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(result.stdout.splitlines()[-1])
    assert answers["tensorflow"] == OLDER and minor(OLDER) < minor(tf.__version__)
    check_same_answers(answers, answers_here)


def test_the_stand_in_on_tensorflow_2_15_serves_it_the_same(keras_export, jpegs, answers_here, tmp_path):
    """`python -m serving.launch --server standin` in .venv: REST (both signatures) and gRPC."""
    rest_port, grpc_port = free_ports(2)
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [str(OLDER_PYTHON), "-m", "serving.launch", "--server", "standin",
             "--model_base_path", str(keras_export.parent), "--rest_api_port", str(rest_port),
             "--port", str(grpc_port)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    rest = RestClient(f"http://127.0.0.1:{rest_port}", "image_classifier")
    grpc = GrpcClient(f"127.0.0.1:{grpc_port}", "image_classifier")
    try:
        client_lib.wait_until_available(rest, 240)
        check_same_answers(rest.predict(jpegs), answers_here)
        keyed = rest.predict(jpegs, signature.SIGNATURE_KEYED, keys=[f"k{i}" for i in range(len(jpegs))])
        check_same_answers(keyed, answers_here)
        assert list(keyed["key"]) == [f"k{i}" for i in range(len(jpegs))]
        check_same_answers(grpc.predict(jpegs), answers_here)
    finally:
        rest.close()
        grpc.close()
        server.send_signal(signal.SIGTERM)  # launch replaced itself with the stand-in
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    lines = log.read_text().splitlines()
    assert (f"serving.launch: the export (version {keras_export.name}) was written by TensorFlow "
            f"{tf.__version__}; the stand-in runs this environment's TensorFlow {OLDER}, older than "
            "the export's: TensorFlow promises no forward compatibility") in "\n".join(lines)
    assert server.returncode == 0 and "serving.standin.server: stopped" in lines
