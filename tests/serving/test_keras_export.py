"""The Keras engine's export serves as the Estimator engine's does: same signatures, same tools.

Both engines train the same tiny run; their exports' signatures (names, inputs, outputs,
dtypes, shapes, method), warm-up requests and labels constant are compared. The Keras
export then goes through what serves the Estimator export, unchanged: the stand-in over
REST and gRPC (keyed signature included), `serving.client`, Beam batch prediction
(serving.batch_predict) and the in-process predictor, each agreeing with the Keras
network on the checkpoint to 1e-5. (`gcloud ai-platform local predict`:
tests/cloud/test_gcloud_local_predict.py.)

    .venv/bin/python -m pytest tests/serving/test_keras_export.py
"""
import json

import numpy as np
import pytest
import tensorflow as tf

from common import export_predictor, image_ops, signature, warmup
from serving import batch_predict, client
from tests.serving.test_real_export import predict_in_process, predict_over_servers
from tests.engines import HAS_ESTIMATOR, needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.export import contract

pytestmark = [pytest.mark.trains]

TOLERANCE = 1e-5
LABELS = ("cat", "dog", "fish")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{engine: (output_dir, export_dir)} of the same tiny run by each engine (.venv-keras: Keras only)."""
    from tests.conftest import write_dataset
    from trainer import task
    root = tmp_path_factory.mktemp("engines")
    data = write_dataset(root / "data", {"train": 24, "eval": 11}, LABELS, size=20)
    found = {}
    for engine in ("estimator", "keras") if HAS_ESTIMATOR else ("keras",):
        flags = dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                     output_dir=root / engine, engine=engine, moving_average_decay=0.9)
        found[engine] = (str(root / engine), task.main(as_argv(flags)))
    return found


def signature_contract(export_dir):
    """{signature: (method, {input: (dtype, shape)}, {output: (dtype, shape)})} of an export."""
    def tensors(infos):
        return {name: (info.dtype, [d.size for d in info.tensor_shape.dim]) for name, info in infos.items()}
    (meta_graph,) = contract.read_saved_model(export_dir).meta_graphs
    return {name: (s.method_name, tensors(s.inputs), tensors(s.outputs))
            for name, s in meta_graph.signature_def.items()}


@needs_estimator
def test_both_engines_export_the_same_contract(exports):
    by_engine = {engine: signature_contract(export_dir) for engine, (_, export_dir) in exports.items()}
    assert by_engine["keras"] == by_engine["estimator"]
    assert set(by_engine["keras"]) == set(signature.SIGNATURES)
    keyed = by_engine["keras"][signature.SIGNATURE_KEYED]
    assert keyed[1] == {"image_bytes": (tf.string.as_datatype_enum, [-1]), "key": (tf.string.as_datatype_enum, [-1])}
    assert keyed[2]["probabilities"] == (tf.float32.as_datatype_enum, [-1, 3])
    warmups = {engine: [(r.model_spec.signature_name, len(r.inputs[signature.INPUT_IMAGE_BYTES].string_val))
                        for r in warmup.read_warmup_requests(export_dir)]
               for engine, (_, export_dir) in exports.items()}
    assert warmups["keras"] == warmups["estimator"] and warmups["keras"]
    assert export_predictor.load_export(exports["keras"][1]).labels == list(LABELS)


def checkpoint_probabilities(output_dir, jpegs):
    """The Keras engine's network on the checkpoint (its moving averages), through the eval image path."""
    from trainer import chain
    from trainer.keras import engine as keras_engine
    from trainer.keras import checkpoint as checkpoint_lib
    from trainer.run import checkpoints
    params = chain.resolve({"output_dir": output_dir})
    engine = keras_engine.KerasEngine(params)
    prefix, _ = checkpoints.latest_checkpoint(output_dir)
    images = tf.stack([image_ops.preprocess_for_eval(jpeg, params["image_size"]) for jpeg in jpegs])
    with checkpoint_lib.weights_of(engine.model.network, prefix, use_averages=True) as network:
        return tf.nn.softmax(network(images, training=False)).numpy()


def test_the_keras_export_serves_through_every_route_unchanged(exports, make_jpeg, tmp_path, capsys):
    output_dir, export_dir = exports["keras"]
    jpegs = [make_jpeg(24, 24, seed=1), make_jpeg(20, 37, seed=2), make_jpeg(40, 16, seed=3),
             make_jpeg(24, 24, seed=4, mode="L")]
    expected = checkpoint_probabilities(output_dir, jpegs)
    rest, grpc = predict_over_servers(export_dir, jpegs)  # the stand-in; keyed signature included
    for name, probabilities in {"saved_model": predict_in_process(export_dir, jpegs), "rest": rest,
                                "grpc": grpc}.items():
        np.testing.assert_allclose(probabilities, expected, rtol=0, atol=TOLERANCE, err_msg=name)
    files = []
    for i, jpeg in enumerate(jpegs):
        files.append(tmp_path / f"{i}.jpg")
        files[-1].write_bytes(jpeg)
    (tmp_path / "images.csv").write_text("".join(f"{path}\n" for path in files))
    batch_predict.run([f"--input_csv={tmp_path / 'images.csv'}", f"--model_dir={export_dir}",
                       f"--output={tmp_path}/predictions", "--top_k=3"])
    records = [json.loads(line) for path in sorted(tmp_path.glob("predictions-*.jsonl")) for line in open(path)]
    by_uri = {r["uri"]: {t["class"]: t["probability"] for t in r["top_k"]} for r in records}
    for path, row in zip(files, expected):
        np.testing.assert_allclose([by_uri[str(path)][label] for label in LABELS], row, atol=TOLERANCE)
    check_client(export_dir, files, expected, capsys)


def check_client(export_dir, files, expected, capsys):
    """python -m serving.client against the stand-in serving the Keras export."""
    import os
    from serving.standin import server
    running = server.start_server("image_classifier", os.path.dirname(export_dir))
    try:
        capsys.readouterr()
        code = client.main(["--server", f"http://127.0.0.1:{running.rest_port}", "--json",
                            "--top_k", "3"] + [str(path) for path in files])
    finally:
        running.stop()
    results = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["error"] for r in results] == [None] * len(files)
    for result, row in zip(results, expected):
        assert result["top_k"][0]["class"] == LABELS[int(np.argmax(row))]
        assert result["top_k"][0]["probability"] == pytest.approx(row.max(), abs=TOLERANCE)
