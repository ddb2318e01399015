"""python -m trainer.export_tflite on the session's tiny trained run (the Estimator engine's export
in .venv, the Keras engine's in .venv-keras): the float32 model gives the export's numbers, the
int8 model takes the integer input its metadata states, the metadata's preprocessing is the eval
image path, a copy of the run without its export converts its checkpoint (exported by the engine
into a temporary directory, OUT/export left alone), and each mistake is one line, exit code 2,
nothing written. The command runs three times (a conversion of the export, one of a checkpoint,
a refusal after TensorFlow loads), started at once: TensorFlow's start-up is most of each. The
other mistakes are named by tflite_sources.plan and find_checkpoint in the test's process.

    .venv/bin/python -m pytest tests/trainer/test_export_tflite.py
    .venv-keras/bin/python -m pytest tests/trainer/test_export_tflite.py
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from common import export_predictor, image_ops
from common.user_errors import UserError
from tests.conftest import NUM_GOOD_IMAGES, make_jpeg_bytes
from tests.user_commands import start, wait_until_it_catches
from trainer import export_tflite
from trainer.export import tflite, tflite_check, tflite_files, tflite_sources
from trainer.run import checkpoints

@pytest.fixture(scope="module")
def unexported_run(trained_run, tmp_path_factory):
    """A copy of the tiny run without its export: its checkpoints, params.json, eval records."""
    output_dir, _, _ = trained_run
    copy = tmp_path_factory.mktemp("unexported") / "out"
    shutil.copytree(output_dir, copy, ignore=shutil.ignore_patterns("export", "best_export", "tflite"))
    return copy


def listing(directory):
    """{relative path: (size, mtime)} of every file under directory."""
    return {os.path.relpath(os.path.join(root, name), directory):
            (os.path.getsize(os.path.join(root, name)), os.path.getmtime(os.path.join(root, name)))
            for root, _, names in os.walk(directory) for name in names}


def finished(process, timeout=300):
    """The started command, once it has exited: a CompletedProcess."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def commands(trained_run, unexported_run, tmp_path_factory):
    """{name: (the finished command, the directory it was given)}: "converted" (the tiny run's
    export to DIR/models), "unexported" (unexported_run's latest checkpoint, into the run; DIR is
    the run's file listing before), "too_few" (as many calibration images as the eval records
    hold, which would leave none to check on; DIR is empty)."""
    output_dir, _, _ = trained_run
    root = tmp_path_factory.mktemp("tflite")
    (root / "too_few").mkdir()
    argvs = {"converted": ("--output_dir", output_dir, "--tflite_dir", root / "models", "--calibration_images", 8),
             "unexported": ("--output_dir", unexported_run, "--calibration_images", 4),
             "too_few": ("--output_dir", output_dir, "--tflite_dir", root / "too_few" / "models",
                         "--calibration_images", NUM_GOOD_IMAGES)}
    given = {"converted": root / "models", "unexported": listing(unexported_run), "too_few": root / "too_few"}
    started = {name: start("trainer.export_tflite", *argv) for name, argv in argvs.items()}
    return {name: (finished(process), given[name]) for name, process in started.items()}


@pytest.fixture(scope="module")
def converted(commands):
    """(the command's result, the TFLite directory it wrote) for the tiny run."""
    return commands["converted"]


def read_json(path):
    return json.loads(path.read_text())


@pytest.mark.process
@pytest.mark.trains  # (the session's trained_run, tests/conftest.py)
def test_the_command_writes_both_models_their_metadata_and_their_check(converted):
    result, tflite_dir = converted
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(os.listdir(tflite_dir)) == sorted([
        tflite_files.FLOAT32_FILE, tflite_files.INT8_FILE, tflite_files.METADATA_FILE,
        tflite_files.CHECK_FILE])
    check = read_json(tflite_dir / tflite_files.CHECK_FILE)
    assert check["images"] == NUM_GOOD_IMAGES - 8  # 8 calibrated the int8 model: never scored
    assert (check["calibration"]["images"], check["calibration"]["of_eval_images"]) == (8, NUM_GOOD_IMAGES)
    assert read_json(tflite_dir / tflite_files.METADATA_FILE)["calibration"]["images"] == 8
    float32, int8 = check[tflite_files.FLOAT32_FILE], check[tflite_files.INT8_FILE]
    assert float32["top1_agreement"] >= 0.995 and 0 <= float32["max_abs_diff"] < 1e-5
    assert 0 <= int8["top1_agreement"] <= 1 and 0 < int8["max_abs_diff"] <= 1  # int8 steps of 1/256
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["model", "top-1", "agreement", "max", "|diff|", "accuracy"]
    assert lines[2].split()[:3] == [tflite_files.FLOAT32_FILE, "100.00%", f"{float32['max_abs_diff']:.2g}"]
    assert lines[-1].startswith(f"tflite: {tflite_dir} ") and len(lines) == 5
    assert lines[-1].endswith(f", checked on {NUM_GOOD_IMAGES - 8} eval images, none of the 8 that "
                              "calibrated the int8 model; float32 agreement goal 99.5%)")
    assert result.stderr == ""


@pytest.mark.process
@pytest.mark.trains
def test_the_float32_model_gives_the_exports_probabilities(converted, trained_run):
    _, export_dir, _ = trained_run
    _, tflite_dir = converted
    jpegs = [make_jpeg_bytes(seed, size=20 + seed) for seed in range(6)]
    expected = export_predictor.predict_probabilities(export_predictor.load_export(str(export_dir)), jpegs)
    interpreter = tflite_check.make_interpreter((tflite_dir / tflite_files.FLOAT32_FILE).read_bytes())
    image_size = read_json(tflite_dir / tflite_files.METADATA_FILE)["preprocessing"]["resize"]["height"]
    actual = tflite_check.run_interpreter(interpreter, tflite_check.preprocess(jpegs, image_size))
    np.testing.assert_allclose(actual, expected, atol=1e-5)


@pytest.mark.process
@pytest.mark.trains
def test_the_int8_models_input_is_the_integer_type_its_metadata_states(converted):
    _, tflite_dir = converted
    stated = read_json(tflite_dir / tflite_files.METADATA_FILE)["models"][tflite_files.INT8_FILE]
    detail = tflite_check.make_interpreter(
        (tflite_dir / tflite_files.INT8_FILE).read_bytes()).get_input_details()[0]
    assert detail["dtype"] in (np.int8, np.uint8)
    assert stated["input"]["dtype"] == detail["dtype"].__name__
    scale, zero_point = detail["quantization"]
    assert stated["input"]["quantization"] == pytest.approx(
        {"scale": scale, "zero_point": zero_point, "real_value": stated["input"]["quantization"]["real_value"]})
    # [-1, 1] fills the int8 range: about 2 / 255 a step
    assert 1 / 255 < scale < 3 / 255


def test_the_metadatas_preprocessing_is_the_eval_image_path():
    """Following the stated steps by hand (decode, center square, resize, normalize) gives what
    image_ops.preprocess_for_eval gives: a phone app that follows the metadata feeds the model
    what evaluation fed the export."""
    pixels = np.random.default_rng(3).integers(0, 256, (22, 30, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(pixels).numpy()
    stated = image_ops.describe_eval_preprocessing(12)
    square = tf.io.decode_jpeg(jpeg, channels=3)[:, 4:26]  # 22 x 30: the centered 22 x 22
    resized = tf.compat.v1.image.resize_bilinear(
        square[tf.newaxis], [stated["resize"]["height"], stated["resize"]["width"]],
        half_pixel_centers=stated["resize"]["half_pixel_centers"])[0]
    by_hand = resized.numpy() * stated["normalize"]["scale"] + stated["normalize"]["offset"]
    np.testing.assert_allclose(by_hand, image_ops.preprocess_for_eval(jpeg, 12).numpy(), atol=1e-5)
    assert stated["value_range"] == [-1.0, 1.0] and stated["channel_order"] == "RGB"


@pytest.mark.parametrize("values, quantization, dtype, expected", [
    ([-2.0, 0.0, 0.5, 1.0], (2 / 255, 0), np.int8, [-128, 0, 64, 127]),
    ([-2.0, 0.0, 1.0], (2 / 255, 128), np.uint8, [0, 128, 255]),
])
def test_quantize_is_round_scale_plus_zero_point_clipped(values, quantization, dtype, expected):
    quantized = tflite_check.quantize(np.array(values, np.float32), quantization, dtype)
    assert quantized.dtype == dtype and quantized.tolist() == expected


@pytest.mark.process
@pytest.mark.trains
def test_too_few_eval_images_to_calibrate_and_check_is_one_line_exit_2_nothing_written(commands):
    result, given = commands["too_few"]
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: the eval records hold {NUM_GOOD_IMAGES} images: --calibration_images={NUM_GOOD_IMAGES} "
        "leaves none to check the models on (the check scores only images the int8 model was not "
        f"calibrated on); pass --calibration_images={NUM_GOOD_IMAGES - 1} or fewer, or more eval data"]
    assert os.listdir(given) == []


@pytest.mark.parametrize("calibrating, total", [(100, 340), (8, 11), (1, 2), (5, 6), (3, 1000)])
def test_calibration_and_check_images_are_disjoint_and_the_calibration_spread_evenly(calibrating, total):
    split = tflite_check.EvalSplit(calibrating, total)
    chosen = [index for index in range(total) if split.calibrates(index)]
    checked = [index for index in range(total) if split.is_checked(index)]
    assert len(chosen) == calibrating and len(checked) == total - calibrating
    assert sorted(chosen + checked) == list(range(total))
    gaps = np.diff([-1] + chosen + [total])  # the records between two calibration images, and at the ends
    assert gaps.max() <= -(-total // calibrating)  # never more than ceil(n / c) apart


def test_the_split_is_of_the_records_in_file_order(write_tfrecord_dataset):
    """Record index runs across the sorted eval files: the calibration part and the checked
    part of two shards are each other's complement."""
    data = write_tfrecord_dataset({"eval": 7}, labels=("a", "b"), size=12, shards=2)
    paths = sorted(glob.glob(f"{data}/eval-*"))
    split = tflite_check.EvalSplit(3, tflite_check.count_eval_examples(paths))
    every = [jpeg for jpeg, _ in tflite_check.read_eval_examples(paths)]
    calibrating = [jpeg for jpeg, _ in tflite_check.read_eval_examples(paths, split.calibrates)]
    checked = [jpeg for jpeg, _ in tflite_check.read_eval_examples(paths, split.is_checked)]
    assert split.total == len(every) == 7 and len(calibrating) == 3 and len(checked) == 4
    assert not set(calibrating) & set(checked) and sorted(calibrating + checked) == sorted(every)


def flags(**values):
    defaults = {"output_dir": None, "export_dir": None, "checkpoint": None, "eval_data_path": None,
                "tflite_dir": None, "calibration_images": 4}
    return argparse.Namespace(**dict(defaults, **values))


def write_saved_model_without_the_contract(path):
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x * 2}, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.f})
    return path


@pytest.mark.parametrize("case, message", [
    ("nothing", "pass --output_dir OUT (a trainer.task run) or --export_dir DIR"),
    ("not_a_run", "is not a training run (no params.json)"),
    ("not_exported", "has no export under export/image_classifier and no checkpoint: train first "
                     "(python -m trainer.task --output_dir"),
    ("checkpoint_of_an_export", "--checkpoint=2 is a checkpoint of a run: pass its --output_dir OUT, "
                                "without --export_dir"),
    ("no_eval_files", "--eval_data_path=/nowhere/eval-* matches no files"),
    ("zero_calibration", "--calibration_images=0 must be 1 or more"),
    ("export_without_tflite_dir", "--export_dir without --output_dir needs --tflite_dir DIR"),
    ("tflite_dir_exists", "exists; remove it or pass another --tflite_dir"),
    ("tflite_dir_under_a_file", "which is a file, not a folder; pass another --tflite_dir"),
])
@pytest.mark.trains
def test_each_mistake_is_named_before_anything_is_written(case, message, trained_run, tmp_path):
    output_dir, export_dir, data_dir = trained_run
    run = tmp_path / "run"
    run.mkdir()
    if case == "not_exported":
        (run / "params.json").write_text("{}")
    given = {
        "nothing": flags(), "not_a_run": flags(output_dir=str(run)),
        "not_exported": flags(output_dir=str(run)),
        "no_eval_files": flags(output_dir=str(output_dir), eval_data_path="/nowhere/eval-*"),
        "zero_calibration": flags(output_dir=str(output_dir), calibration_images=0),
        "export_without_tflite_dir": flags(export_dir=str(export_dir),
                                           eval_data_path=f"{data_dir}/eval-*"),
        "checkpoint_of_an_export": flags(export_dir=str(export_dir), checkpoint="2",
                                         tflite_dir=str(run / "models")),
        "tflite_dir_exists": flags(output_dir=str(output_dir), tflite_dir=str(run)),
        "tflite_dir_under_a_file": flags(output_dir=str(output_dir), tflite_dir=str(run / "notes.txt" / "m")),
    }[case]
    if case == "tflite_dir_under_a_file":
        (run / "notes.txt").write_text("a file")
    with pytest.raises(tflite_sources.TFLiteSourceError, match=re.escape(message)):
        tflite_sources.plan(given, export_tflite.find_checkpoint)
    assert sorted(os.listdir(run)) == {"not_exported": ["params.json"], "tflite_dir_under_a_file": ["notes.txt"]}.get(case, [])


@pytest.mark.trains
def test_a_runs_models_go_to_its_tflite_folder_by_export_version(trained_run):
    output_dir, export_dir, _ = trained_run
    plan = tflite_sources.plan(flags(output_dir=str(output_dir)), export_tflite.find_checkpoint)
    assert plan.export_dir == str(export_dir)
    assert plan.tflite_dir == os.path.join(str(output_dir), "tflite", "image_classifier",
                                           os.path.basename(str(export_dir)))


def test_an_export_without_the_serving_contract_is_refused(tmp_path):
    export_dir = write_saved_model_without_the_contract(tmp_path / "1")
    with pytest.raises(tflite.NotConvertible, match="has no 'serving_default' signature taking 'image_bytes'"):
        tflite.read_serving_cut(str(export_dir))


def copy_export(export_dir, to):
    shutil.copytree(export_dir, to)
    return to


@pytest.mark.parametrize("damage", ["empty_pb", "cut_pb", "random_pb", "no_variables", "cut_variables"])
@pytest.mark.trains  # the session's trained_run's export, copied and damaged
def test_a_damaged_export_is_one_line_naming_it(damage, trained_run, tmp_path):
    export_dir = copy_export(trained_run[1], tmp_path / "7")
    pb, data = export_dir / "saved_model.pb", next((export_dir / "variables").glob("*.data-*"), None)
    if data is None and damage.endswith("variables"):
        pytest.skip("this environment's trained_run is a Keras export: its weights are constants "
                    "in the graph, with no variables/ data to damage")
    if damage == "empty_pb":
        pb.write_bytes(b"")
    elif damage == "cut_pb":
        pb.write_bytes(pb.read_bytes()[:len(pb.read_bytes()) // 2])
    elif damage == "random_pb":
        pb.write_bytes(np.random.default_rng(0).bytes(4096))
    elif damage == "no_variables":
        shutil.rmtree(export_dir / "variables")
    else:
        data.write_bytes(data.read_bytes()[:len(data.read_bytes()) // 2])
    with pytest.raises(tflite.NotConvertible, match=re.escape(f"{export_dir} cannot be loaded as a SavedModel (")):
        tflite.read_serving_cut(str(export_dir))


@pytest.mark.trains
def test_eval_records_of_other_classes_are_refused(trained_run, write_tfrecord_dataset):
    _, export_dir, data_dir = trained_run
    labels = tflite.read_serving_cut(str(export_dir)).labels
    tflite.check_eval_labels(sorted(glob.glob(f"{data_dir}/eval-*")), labels)  # its own: accepted
    other = write_tfrecord_dataset({"eval": 6}, labels=("ant", "bee", "cow", "dog", "elk")[:len(labels) + 1])
    with pytest.raises(tflite.NotConvertible, match=f"names {len(labels) + 1} classes .* and the model {len(labels)}"):
        tflite.check_eval_labels(sorted(glob.glob(f"{other}/eval-*")), labels)
    (other / "labels.txt").unlink()  # records alone: a label id past the model's classes
    with pytest.raises(tflite.NotConvertible, match=f"hold label id {len(labels)}, but the model has {len(labels)} classes"):
        tflite.check_eval_labels(sorted(glob.glob(f"{other}/eval-*")), labels)


@pytest.mark.process
@pytest.mark.trains
# A stop that lands inside numpy's C-extension import (TensorFlow 2.20's venv) comes out of it as
# ImportError; common/console.py answers it as the stop (a fresh clone's CI failed here, 85f1eed).
@pytest.mark.parametrize("stop, code, words", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                               (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_a_stopped_conversion_is_one_line_and_writes_nothing(stop, code, words, trained_run, tmp_path):
    """Stopped as soon as the command handles the signal (TensorFlow still loading, seconds before
    the conversion ends): one line, no traceback. A fixed sleep raced the conversion's end on a
    quiet machine (the signal then met a process already exiting)."""
    process = start("trainer.export_tflite", "--output_dir", trained_run[0], "--tflite_dir",
                    tmp_path / "models", "--calibration_images", 4)
    wait_until_it_catches(process, signal.SIGTERM)  # Python catches SIGINT from its start; the
    process.send_signal(stop)                       # command's handlers come together, SIGTERM's visibly
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith(f"{words}: the models were not written")
    assert not (tmp_path / "models").exists()


def test_a_full_disk_leaves_no_staging_folder_and_is_one_line(tmp_path, monkeypatch):
    """TensorFlow's file writer raises ResourceExhaustedError on a full disk (the issue's sweep saw
    it, with the .staging folder left behind); here the writer's write raises it."""
    def no_space(*_):
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
    monkeypatch.setattr(tf.io.gfile.GFile, "write", no_space)
    with pytest.raises(UserError, match="no space left on the device of .*: nothing was written"):
        tflite_files.write_tflite_dir(str(tmp_path / "m"), {"model.tflite": b"x"}, {}, {})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("agreement, expected", [
    (1.0, None), (0.995, None), (None, None),
    (0.99, "model.tflite agrees with the export on 99.00% of the eval images, below the goal 99.5%"),
])
def test_a_float32_model_below_the_agreement_goal_is_said(agreement, expected):
    said = tflite_check.shortfall({tflite_files.FLOAT32_FILE: {"top1_agreement": agreement}},
                                  tflite_files.FLOAT32_FILE)
    assert said == expected or said.startswith(expected)


@pytest.mark.process
@pytest.mark.trains
def test_a_run_without_an_export_converts_its_latest_checkpoint(commands, unexported_run, trained_run):
    """The engine exports the checkpoint into a temporary directory: the run gains its tflite/
    folder and nothing else (no export/ version TF Serving would start serving), and the
    float32 model gives the run's own export's probabilities."""
    _, export_dir, _ = trained_run
    result, before = commands["unexported"]
    prefix, step = checkpoints.latest_checkpoint(str(unexported_run))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    tflite_dir = unexported_run / "tflite" / "image_classifier" / str(step)
    assert {k: v for k, v in listing(unexported_run).items() if not k.startswith("tflite/")} == before
    assert result.stdout.splitlines()[-1].startswith(
        f"tflite: {tflite_dir} (checkpoint {prefix}, exported to a temporary SavedModel, ")
    check = read_json(tflite_dir / tflite_files.CHECK_FILE)
    assert check[tflite_files.FLOAT32_FILE]["top1_agreement"] >= 0.995
    metadata = read_json(tflite_dir / tflite_files.METADATA_FILE)
    assert (metadata["checkpoint"], metadata["step"]) == (prefix, step)
    assert "export_dir" not in metadata
    jpegs = [make_jpeg_bytes(seed, size=20 + seed) for seed in range(4)]
    expected = export_predictor.predict_probabilities(export_predictor.load_export(str(export_dir)), jpegs)
    interpreter = tflite_check.make_interpreter((tflite_dir / tflite_files.FLOAT32_FILE).read_bytes())
    actual = tflite_check.run_interpreter(interpreter, tflite_check.preprocess(jpegs, 16))
    np.testing.assert_allclose(actual, expected, atol=1e-5)


@pytest.mark.trains
def test_a_checkpoint_the_run_does_not_hold_is_one_line_exit_2_nothing_written(
        unexported_run, tmp_path, capsys):
    steps = ", ".join(str(step) for step, _ in checkpoints.list_checkpoints(str(unexported_run)))
    with pytest.raises(SystemExit) as exited:
        export_tflite.main(["--output_dir", str(unexported_run), "--checkpoint", "99",
                            "--tflite_dir", str(tmp_path / "models")])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --checkpoint=99: {unexported_run} has no checkpoint of step 99 (its steps: {steps}); "
        f"pass one of them, or latest"]
    assert os.listdir(tmp_path) == []


def copy_checkpoint(run, step, to):
    """to/ holding run's checkpoint of step and nothing else; its prefix."""
    to.mkdir()
    for path in run.glob(f"model.ckpt-{step}.*"):
        shutil.copy(path, to / path.name)
    return str(to / f"model.ckpt-{step}")


@pytest.mark.parametrize("damage, wanted, message", [
    (None, "model.ckpt-{step}", None),
    (None, "{prefix}", None),
    (None, "/elsewhere/model.ckpt-{step}", "--checkpoint=/elsewhere/model.ckpt-{step} is not a "
                                           "checkpoint of {run}: pass a step"),
    ("cut_data", "{step}", "checkpoint {prefix} (step {step}) is damaged: "),
    ("no_index", "{step}", "checkpoint {prefix} (step {step}) is damaged: model.ckpt-{step}.index "
                           "is missing (its data is here); pass another --checkpoint (steps: none)"),
    ("cut_data", None, "checkpoint {prefix} (step {step}) is damaged: "),
])
@pytest.mark.trains
def test_the_checkpoint_is_found_and_checked_before_use(damage, wanted, message, unexported_run, tmp_path):
    _, step = checkpoints.latest_checkpoint(str(unexported_run))
    run = tmp_path / "run"
    prefix = copy_checkpoint(unexported_run, step, run)
    if damage == "cut_data":
        data = next(run.glob("*.data-*"))
        data.write_bytes(data.read_bytes()[:8])
    elif damage == "no_index":
        (run / f"model.ckpt-{step}.index").unlink()
    fill = {"step": step, "prefix": prefix, "run": run}
    wanted = wanted and wanted.format(**fill)
    if message is None:
        assert export_tflite.find_checkpoint(str(run), wanted) == (prefix, step)
        return
    with pytest.raises(checkpoints.CheckpointError, match="^" + re.escape(message.format(**fill))):
        export_tflite.find_checkpoint(str(run), wanted)
