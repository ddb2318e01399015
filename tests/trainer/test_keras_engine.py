"""--engine keras end to end on a tiny dataset: the run directory contract of the Estimator engine.

The session's finished Keras run (tests/trainer/conftest.py tiny_run_of), copied: its run
directory, a rerun, predict mode and the report, then the refusal to resume it with the other
engine; the knobs (moving average, label smoothing, momentum, step schedule) in one short run,
evaluate/export modes, warm start from the session's Estimator run, and the TPU route as far as
a CPU goes (a fake resolver; a real TPUStrategy needs a TPU).

    .venv/bin/python -m pytest tests/trainer/test_keras_engine.py
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from common import signature, warmup
from tests.conftest import write_dataset
from tests.engines import in_keras_env, needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from tests.trainer.run_checks import (check_eval_counts_every_example_once, check_rerun_changes_nothing,
                                      read_eval_events, read_eval_split, served_predictions, summary_tags)
from trainer import chain, task
from trainer.export import contract
from trainer.keras import strategy as strategy_lib
from trainer.objective import metrics
from trainer.report import __main__ as report_main
from trainer.run import checkpoints, eval_records, variable_names

KERAS = ["--engine=keras"]


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """This module's tests only read it: written once (tests/trainer/conftest.py's is per test)."""
    return write_dataset(tmp_path_factory.mktemp("tiny") / "data", {"train": 24, "eval": 11}, size=20)


def check_run_directory(params, export_dir):
    """What the Estimator engine's run leaves (tests/trainer/test_estimator_engine.py), from the Keras engine."""
    out = params["output_dir"]
    records = eval_records.read_eval_results(out)
    assert [r["global_step"] for r in records] == [2, 4]
    assert {"accuracy", "top_2_accuracy", "mean_per_class_accuracy", "cross_entropy", "loss"} <= set(records[0])
    assert metrics.CONFUSION_MATRIX_METRIC not in records[0]
    assert records[0]["best_export"] == "best_export/image_classifier/2"  # relative to the run
    assert json.load(open(os.path.join(out, "params.json")))["engine"] == "keras"
    assert [step for step, _ in checkpoints.list_checkpoints(out)] == [2, 4]
    assert checkpoints.is_state_relative(out) and checkpoints.check_run_state(out, repair=False)[1] == 4
    assert {"loss", "learning_rate", "train_accuracy", "global_step/sec"} <= summary_tags(out)
    pictures = read_eval_events(f"{out}/eval")
    assert set(pictures["confusion_matrix"]) == {2, 4} and len(pictures) == 1 + len(params["labels"])
    assert {"accuracy", "loss", "top_2_accuracy"} <= summary_tags(f"{out}/eval")
    assert export_dir == os.path.join(out, signature.EXPORT_SUBDIR, "image_classifier", "4")
    contract.check_export(export_dir)
    assert {r.model_spec.signature_name for r in warmup.read_warmup_requests(export_dir)} == \
        set(signature.SIGNATURES)


def check_predict_mode(params, export_dir):
    """--mode predict with the Keras engine: one record per image, as the export classifies it."""
    jpegs, _ = read_eval_split(params)
    folder = os.path.join(params["output_dir"], "images")
    os.makedirs(folder)
    for i, jpeg in enumerate(jpegs):
        with open(os.path.join(folder, f"{i}.jpg"), "wb") as f:
            f.write(jpeg)
    with open(os.path.join(folder, "images.csv"), "w") as f:
        f.write("".join(f"{i}.jpg\n" for i in range(len(jpegs))) + "missing.jpg\n")
    summary = task.main([f"--output_dir={params['output_dir']}", "--mode=predict",
                         f"--predict_input={folder}/images.csv"])
    assert summary["images"] == len(jpegs) + 1 and summary["errors"] == {"missing_file": 1}
    records = [json.loads(line) for path in sorted(os.listdir(summary["output_dir"]))
               if path.endswith(".jsonl") for line in open(os.path.join(summary["output_dir"], path))]
    served = served_predictions(export_dir, signature.SIGNATURE_DEFAULT, jpegs)[signature.OUTPUT_PROBABILITIES]
    for record in records[:len(jpegs)]:
        row = served[int(os.path.basename(record["uri"]).split(".")[0])]
        by_class = {item["class"]: item["probability"] for item in record["top_k"]}
        np.testing.assert_allclose([by_class[label] for label in params["labels"]], row, atol=1e-5)


def tiny_run_argv(data, out, engine="keras", **flags):
    """argv of tiny_run_of's run (tests/trainer/conftest.py) of that engine, output_dir out."""
    return as_argv(dict(TINY_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                        output_dir=out, engine=engine, **flags))


@in_keras_env
@pytest.mark.trains
def test_a_keras_run_keeps_the_run_directory_contract(copy_of_tiny_run, capsys):
    data, out = copy_of_tiny_run("keras")  # the session's finished run: ours to rerun and refuse
    argv = tiny_run_argv(data, out)
    params = chain.parse_params(argv)
    export_dir = os.path.join(out, signature.EXPORT_SUBDIR, "image_classifier", "4")
    check_run_directory(params, export_dir)
    check_eval_counts_every_example_once(params, export_dir)
    check_rerun_changes_nothing(params, argv)
    check_predict_mode(params, export_dir)
    report_main.main([params["output_dir"]])
    assert os.path.getsize(os.path.join(params["output_dir"], "report.html")) > 1000
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # its checkpoints are the Keras engine's
        task.main(tiny_run_argv(data, out, engine="estimator", train_steps=6))
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(error.splitlines()) == 1
    assert "holds checkpoints of a run built with other settings: engine 'keras' -> 'estimator'" in error
    assert eval_records.read_eval_results(params["output_dir"])[-1]["global_step"] == 4


@in_keras_env
@pytest.mark.trains
def test_the_knobs_train_and_the_averages_are_what_is_evaluated(tiny_dataset, tmp_path):
    """Moving average, label smoothing, momentum and the step schedule in one run; the record of
    the final step is the evaluation of the averaged weights."""
    flags = dict(TINY_FLAGS, train_data_path=f"{tiny_dataset}/train-*",
                 eval_data_path=f"{tiny_dataset}/eval-*", output_dir=tmp_path / "out",
                 moving_average_decay=0.9, label_smoothing=0.1, optimizer="momentum",
                 lr_schedule="step", early_stopping_patience=5)
    export_dir = task.main(as_argv(flags) + KERAS)
    out = str(tmp_path / "out")
    keys = {name for name, _ in tf.train.list_variables(os.path.join(out, "model.ckpt-4"))}
    averaged = [key for key in keys if key.endswith(".SExponentialMovingAverage/.ATTRIBUTES/VARIABLE_VALUE")]
    assert averaged and "network/logits.Skernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
    final = eval_records.read_eval_results(out)[-1]
    jpegs, labels = read_eval_jpegs(flags["eval_data_path"])
    served = contract_predictions(export_dir, jpegs)
    assert final["accuracy"] == pytest.approx(np.mean(served == labels))


def read_eval_jpegs(pattern):
    return read_eval_split({"eval_data_path": pattern})


def contract_predictions(export_dir, jpegs):
    return served_predictions(export_dir, signature.SIGNATURE_DEFAULT, jpegs)[signature.OUTPUT_CLASS_IDS]


@needs_estimator
@pytest.mark.trains
def test_evaluate_and_export_modes_and_warm_start_from_an_estimator_run(tiny_run_of, tmp_path):
    """An Estimator run warm-starts a Keras run (checkpoints read by name); --mode evaluate and
    --mode export then act on the Keras run's directory."""
    data, source = tiny_run_of("estimator")  # read only: a warm start reads its latest checkpoint
    out = str(tmp_path / "keras_out")
    argv = tiny_run_argv(data, out, warm_start_from=source, warm_start_exclude="", train_steps=2,
                         learning_rate=1e-9, warmup_steps=0)
    task.main(argv)
    before = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(source)))
    after = tf.train.load_checkpoint(f"{out}/model.ckpt-2")
    np.testing.assert_allclose(after.get_tensor(variable_names.network_key("logits/kernel")),
                               before.get_tensor("logits/kernel"), atol=1e-6)  # a 1e-9 rate moves nothing
    record = task.main([f"--output_dir={out}", "--mode=evaluate"])
    assert record["global_step"] == 2 and len(eval_records.read_eval_results(out)) == 2
    tf.io.gfile.rmtree(os.path.join(out, "export"))
    assert task.main([f"--output_dir={out}", "--mode=export"]) == os.path.join(out, "export", "image_classifier", "2")


class FakeTpuVmResolver:
    """TPUClusterResolver(tpu="local") on a TPU VM: no Cloud TPU API call (tests/cloud/test_cluster_roles.py)."""
    made = []

    def __init__(self, tpu=None, zone=None, project=None):
        FakeTpuVmResolver.made.append({"tpu": tpu, "zone": zone, "project": project})

    def master(self):
        return ""


class FakeTpuStrategy:
    """What TPUStrategy(resolver) gives: replicas that split every global batch."""
    def __init__(self, resolver, replicas=8):
        self.resolver, self.num_replicas_in_sync = resolver, replicas


@pytest.mark.parametrize("tpu, connects", [("local", False), ("grpc://10.0.0.2:8470", True)])
def test_use_tpu_builds_tpu_strategy_from_the_tpu_settings(tiny_params, monkeypatch, tpu, connects):
    calls = []
    FakeTpuVmResolver.made = []
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", FakeTpuVmResolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: calls.append("connect"))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: calls.append("initialize"))
    monkeypatch.setattr(tf.distribute, "TPUStrategy", FakeTpuStrategy)
    params = dict(tiny_params, engine="keras", use_tpu=True, tpu=tpu, tpu_zone="z", gcp_project="p")
    strategy = strategy_lib.make_strategy(params)
    assert FakeTpuVmResolver.made == [{"tpu": tpu, "zone": "z", "project": "p"}]
    assert calls == (["connect"] if connects else []) + ["initialize"]
    assert isinstance(strategy.resolver, FakeTpuVmResolver) and strategy.num_replicas_in_sync == 8
    with pytest.raises(Exception, match=r"train_batch_size=12 must be divisible by the 8 replicas"):
        strategy_lib.make_strategy(dict(params, train_batch_size=12))


@in_keras_env
@pytest.mark.trains  # 9 steps through the engine's own train(), not a mode
def test_cpu_run_builds_no_tpu_and_runs_iterations_per_loop_steps_per_call(tiny_params, monkeypatch):
    """Off TPU: the default strategy. Each call of the train function runs iterations_per_loop
    steps (steps_per_execution), cut at every checkpoint step and at the round's end."""
    from trainer.keras import engine as keras_engine, train
    from trainer.run import training_log
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver",
                        lambda **_: pytest.fail("a TPU resolver off TPU"))
    params = dict(tiny_params, engine="keras", iterations_per_loop=3, save_checkpoints_steps=4)
    assert training_log.plan_executions(0, 9, params) == [3, 1, 3, 1, 1]
    assert training_log.plan_executions(5, 8, params) == [3]
    engine = keras_engine.KerasEngine(params)
    calls = []
    traced = engine.train_function
    engine.train_function = lambda iterator, steps: calls.append(int(steps)) or traced(iterator, steps)
    assert engine.train(9) == 9 and calls == [3, 1, 3, 1, 1]
    assert engine.strategy is tf.distribute.get_strategy()
    assert [step for step, _ in checkpoints.list_checkpoints(params["output_dir"])][-2:] == [8, 9]
