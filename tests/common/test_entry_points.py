"""Every command, run as a user runs it: a mistyped flag is one line naming the flag it
resembles, exit code 2; --help loads neither TensorFlow nor Beam (so it answers at once).

    .venv/bin/python -m pytest tests/common/test_entry_points.py -q
"""
import pytest

from tests import user_commands

HEAVY_MODULES = ("tensorflow", "apache_beam", "google.api_core")  # the last: 0.4 s of version scans

# module -> (argv with one mistyped flag, the flag the answer must suggest).
TYPOS = {
    "preprocess.jpeg_to_tfrecord": (["--input_csv", "a.csv", "--output_dir", "out",
                                     "--eval_fracton", "0.2"], "--eval_fraction"),
    "preprocess.demo_data": (["--output_di", "out"], "--output_dir"),
    "serving.launch": (["--model_base_path", "m", "--dry_rn"], "--dry_run"),
    "serving.standin.server": (["--model_base_pat", "m"], "--model_base_path"),
    "common.warmup": (["export", "a.jpg", "--model_nam", "m"], "--model_name"),
    "trainer.task": (["--train_stepz", "30"], "--train_steps"),
    "trainer.report": (["out", "--max_image", "3"], "--max_images"),
    "trainer.export_tflite": (["--output_dir", "out", "--calibration_image", "3"], "--calibration_images"),
    "serving.client": (["--server", "http://127.0.0.1:1", "--top", "3", "a.jpg"], "--top_k"),
    "serving.demo": (["--model_base_path", "m", "--rest_api_prt", "3"], "--rest_api_port"),
    "serving.batch_predict": (["--model_dir", "m", "--output", "o", "--input_csv", "a.csv",
                               "--max_batch_sise", "3"], "--max_batch_size"),
    "bench.bench_batch_predict": (["--batch_sise", "8"], "--batch_size"),
    "bench.bench_input": (["--roundz", "1"], "--rounds"),
    "bench.bench_preprocess": (["--photoz", "1"], "--photos"),
    "bench.bench_serving": (["--roundz", "1"], "--rounds"),
    "bench.bench_serving_floor": (["--requestz", "1"], "--requests"),
    "bench.bench_train": (["--stepz", "1"], "--steps"),
    "bench.floor_server": (["--port", "1", "--model_base_path", "m", "--batching_parameters_file",
                            "b", "--answer_jpg", "a.jpg"], "--answer_jpeg"),
}


def imported_modules(importtime_stderr):
    """The names -X importtime reports ("import time: self | cumulative | name")."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


@pytest.mark.process
@pytest.mark.parametrize("module", sorted(TYPOS))
def test_a_mistyped_flag_is_one_line_naming_the_right_one(module):
    argv, meant = TYPOS[module]
    result = user_commands.run(module, *argv, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert f"did you mean {meant}?" in lines[0]


@pytest.mark.process
@pytest.mark.parametrize("module", sorted(TYPOS))
def test_help_loads_neither_tensorflow_nor_beam(module):
    # PYTHONPROFILEIMPORTTIME=1 is python -X importtime: every import, on stderr.
    result = user_commands.run(module, "--help", timeout=300,
                               env=user_commands.user_env(PYTHONPROFILEIMPORTTIME=1))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: python -m" in result.stdout
    modules = imported_modules(result.stderr)
    assert "argparse" in modules  # the check can fail: it sees what was imported
    assert not modules & set(HEAVY_MODULES), sorted(modules & set(HEAVY_MODULES))


def test_imported_modules_reads_importtime_lines():
    stderr = ("import time: self [us] | cumulative | imported package\n"
              "import time:       120 |        120 |   tensorflow.python\n"
              "import time:        80 |        900 | tensorflow\n")
    assert imported_modules(stderr) == {"imported package", "tensorflow.python", "tensorflow"}
