"""`gcloud ai-platform local predict` on the Keras engine's export: the same answer as in process.

gcloud's local prediction loads the SavedModel with TensorFlow's own loader (the
venv's, set as ml_engine/local_python in a private CLOUDSDK_CONFIG) and runs the
named signature on JSON instances with base64 JPEG bytes, as the online service did. The
Estimator engine's export has the same signatures (tests/serving/test_keras_export.py).

    .venv/bin/python -m pytest tests/cloud/test_gcloud_local_predict.py
"""
import base64
import json

import numpy as np
import pytest

from tests.cloud.test_gcloud_local_train import GCLOUD, gcloud_env, run_gcloud
from tests.serving.test_real_export import predict_in_process
from tests.trainer.conftest import TINY_FLAGS, as_argv

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(GCLOUD is None, reason="gcloud (Google Cloud SDK) is not installed")]


def test_local_predict_serves_the_keras_export(tiny_dataset, make_jpeg, tmp_path):
    from trainer import task
    flags = dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*", train_steps=2,
                 eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / "out", engine="keras")
    export_dir = task.main(as_argv(flags))
    jpegs = [make_jpeg(24, 24, seed=1), make_jpeg(30, 20, seed=2)]
    instances = tmp_path / "instances.json"
    instances.write_text("".join(json.dumps({"image_bytes": {"b64": base64.b64encode(j).decode()},
                                             "key": f"k{i}"}) + "\n" for i, j in enumerate(jpegs)))
    code, output, leftovers = run_gcloud(
        ["ai-platform", "local", "predict", f"--model-dir={export_dir}", f"--json-instances={instances}",
         "--signature-name=predict_keyed", "--format=json"], gcloud_env(tmp_path))
    assert code == 0 and leftovers == [], output[-3000:]
    predictions = json.JSONDecoder().raw_decode(output[output.index("["):])[0]  # then its warnings
    assert [p["key"] for p in predictions] == ["k0", "k1"]
    np.testing.assert_allclose([p["probabilities"] for p in predictions],
                               predict_in_process(export_dir, jpegs), rtol=0, atol=1e-5)
    assert {p["classes"] for p in predictions} <= {"cat", "dog", "fish"}
