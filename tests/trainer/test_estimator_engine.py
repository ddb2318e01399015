"""The whole loop in process: train, evaluate, export, reload the export and predict JPEGs.

The trained run is the session's (tests/trainer/conftest.py tiny_run_of); the small tests read
one dataset written once for the module.

    .venv/bin/python -m pytest tests/trainer/test_estimator_engine.py
"""
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from common import export_versions, image_ops, signature, warmup
from tests.conftest import write_dataset
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.run_checks import (check_eval_counts_every_example_once, check_rerun_changes_nothing,
                                      served_predictions, summary_tags)
from trainer import chain, task
from trainer.estimator import engine as estimator_engine
from trainer.export import contract, staging
from trainer.run import checkpoints, eval_records

ModeKeys = tf.estimator.ModeKeys


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """This module's tests only read it: written once (tests/trainer/conftest.py's is per test)."""
    return write_dataset(tmp_path_factory.mktemp("tiny") / "data", {"train": 24, "eval": 11}, size=20)


def checkpoint_predictions(run_params, jpegs):
    """Probabilities of the latest checkpoint through estimator.predict and the eval preprocessing."""
    def input_fn(params):  # TPUEstimator requires the name "params"
        images = tf.data.Dataset.from_tensor_slices(jpegs).map(
            lambda jpeg: image_ops.preprocess_for_eval(jpeg, params["image_size"]))
        return images.batch(params["batch_size"]).map(lambda image: {"image": image})
    estimator = estimator_engine.make_estimator(dict(run_params, predict_batch_size=len(jpegs)))
    return np.stack([p[signature.OUTPUT_PROBABILITIES] for p in estimator.predict(input_fn)])


def check_outputs(params, export_dir):
    out = params["output_dir"]
    records = eval_records.read_eval_results(out)
    assert [r["global_step"] for r in records] == [2, 4]
    assert {"accuracy", "top_2_accuracy", "mean_per_class_accuracy", "cross_entropy"} <= set(records[0])
    with open(os.path.join(out, "params.json")) as f:
        assert json.load(f) == params
    assert tf.io.gfile.glob(f"{out}/eval/events.out.tfevents.*")  # TensorBoard eval summaries
    assert {"loss", "learning_rate", "global_step/sec", "examples/sec"} <= summary_tags(out)
    # TensorBoard's graph is in the events file; no graph.pbtxt nor model.ckpt-N.meta (RunConfig's
    # checkpoint_save_graph_def: the text graph cost every round seconds on an ImageNet network).
    assert has_graph_event(out)
    assert not tf.io.gfile.glob(f"{out}/graph.pbtxt") and not tf.io.gfile.glob(f"{out}/*.meta")
    assert export_dir == os.path.join(out, signature.EXPORT_SUBDIR, "image_classifier", "4")
    best_versions = os.listdir(os.path.join(out, signature.BEST_EXPORT_SUBDIR, "image_classifier"))
    assert len(best_versions) == 1 and best_versions[0].isdigit()
    # The layout the serving stand-in (and TF Serving) loads, with warmup for every signature.
    assert export_versions.list_versions(os.path.dirname(export_dir)) == [4]
    warmup_signatures = {r.model_spec.signature_name for r in warmup.read_warmup_requests(export_dir)}
    assert warmup_signatures == set(signature.SIGNATURES)
    contract.check_export(export_dir)  # exactly the contract's signatures, no TPU ops


def has_graph_event(directory):
    """Whether directory's TensorBoard event files hold a graph (TensorBoard's Graphs tab)."""
    return any(event.graph_def for path in tf.io.gfile.glob(f"{directory}/events.out.tfevents.*")
               for event in tf.compat.v1.train.summary_iterator(path))


def tiny_run_argv(data, out, **flags):
    """argv of tiny_run_of's run (tests/trainer/conftest.py) with output_dir out."""
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out, engine="estimator", **flags))


@pytest.mark.trains
def test_full_run_exports_a_model_that_serves_jpegs(tiny_run_of, copy_of_tiny_run, make_jpeg):
    data, out = tiny_run_of("estimator")  # read only: the rerun below takes a copy
    params = chain.parse_params(tiny_run_argv(data, out))
    export_dir = os.path.join(out, signature.EXPORT_SUBDIR, "image_classifier", "4")
    check_outputs(params, export_dir)
    check_eval_counts_every_example_once(params, export_dir)
    copy_data, copy = copy_of_tiny_run("estimator")
    copy_params = chain.parse_params(tiny_run_argv(copy_data, copy))
    check_rerun_changes_nothing(copy_params, tiny_run_argv(copy_data, copy))
    jpegs = [make_jpeg(20, 20, seed=1), make_jpeg(28, 24, seed=2), make_jpeg(20, 20, seed=3, mode="L")]
    served = served_predictions(export_dir, signature.SIGNATURE_DEFAULT, jpegs)
    assert served[signature.OUTPUT_PROBABILITIES].shape == (3, 3)
    np.testing.assert_array_equal(served[signature.OUTPUT_CLASS_IDS],
                                  served[signature.OUTPUT_PROBABILITIES].argmax(axis=1))
    labels = np.array(params["labels"], dtype=object)
    assert [c.decode() for c in served[signature.OUTPUT_CLASSES]] == \
        list(labels[served[signature.OUTPUT_CLASS_IDS]])
    # No train/serve skew: the export equals the checkpoint under eval preprocessing.
    np.testing.assert_allclose(served[signature.OUTPUT_PROBABILITIES],
                               checkpoint_predictions(copy_params, jpegs), rtol=1e-5, atol=1e-6)
    keyed = served_predictions(export_dir, signature.SIGNATURE_KEYED, jpegs, keys=[b"a", b"b", b"c"])
    assert list(keyed[signature.OUTPUT_KEY]) == [b"a", b"b", b"c"]
    np.testing.assert_allclose(keyed[signature.OUTPUT_PROBABILITIES], served[signature.OUTPUT_PROBABILITIES])


@pytest.mark.trains
def test_evaluate_and_export_modes_on_an_existing_output_dir(copy_of_tiny_run):
    data, out = copy_of_tiny_run("estimator")  # finished at step 4, evaluated at 2 and 4
    record = task.main(tiny_run_argv(data, out, mode="evaluate"))
    assert record["global_step"] == 4 and len(eval_records.read_eval_results(str(out))) == 3
    tf.io.gfile.rmtree(os.path.join(out, "export"))
    exported = task.main([f"--output_dir={out}", "--mode=export"])  # everything else from params.json
    assert exported == os.path.join(out, "export", "image_classifier", "4")
    contract.check_export(exported)


def test_evaluate_without_a_checkpoint_names_the_directory(tiny_params):
    with pytest.raises(checkpoints.CheckpointError, match="has no checkpoint to evaluate: train first"):
        estimator_engine.run(dict(tiny_params, mode="evaluate"))


def test_cpu_run_constructs_no_tpu_resolver(tiny_params, monkeypatch):
    calls = []

    def fake_resolver(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("no TPU here")
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", fake_resolver)
    estimator = estimator_engine.make_estimator(tiny_params)
    assert estimator.config.cluster_spec.as_dict() == {} and calls == []
    with pytest.raises(RuntimeError, match="no TPU here"):
        estimator_engine.make_estimator(dict(tiny_params, use_tpu=True, tpu="my-tpu", tpu_zone="z", gcp_project="p"))
    assert calls == [{"tpu": "my-tpu", "zone": "z", "project": "p"}]


def test_torn_results_line_is_skipped(tmp_path):
    (tmp_path / eval_records.RESULTS_FILE).write_text('{"global_step": 2, "accuracy": 0.5}\n{"global_st')
    assert eval_records.read_eval_results(str(tmp_path)) == [{"global_step": 2, "accuracy": 0.5}]


def test_export_without_serving_extra_skips_only_the_warmup(tiny_params, tmp_path, monkeypatch):
    # The import fails as if tensorflow-serving-api were not installed.
    monkeypatch.setitem(sys.modules, "common.warmup", None)
    monkeypatch.delattr(sys.modules["common"], "warmup", raising=False)
    assert staging.write_warmup(str(tmp_path), tiny_params) is None
    assert not (tmp_path / signature.WARMUP_FILE).exists()
