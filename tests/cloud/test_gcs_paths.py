"""gs:// readiness of the trainer, tested as far as it honestly can be without GCS.

TF's own GCS filesystem cannot be pointed at an emulator, so:
  * the source check: every file operation of the trainer and its export goes
    through tf.io.gfile (which routes gs:// to TF's GCS filesystem), never
    open/os/shutil/glob/pathlib, which would treat gs:// as a local path;
  * a real run whose every input (globs, labels.txt, metadata.json, TFRecords,
    warmup JPEGs) lives on another TF filesystem than the local disk (ram://,
    TF's in-memory one), and the trainer's own output files round-tripped there;
  * path arithmetic keeps gs:// URLs intact;
  * this TF build has the gs scheme registered (no tensorflow-io needed).
Checkpoints and SavedModels on gs:// are written by TF's Saver and SavedModel
builder; directory renames (Estimator's temp export dir, export_model's
staging dir) are copy-then-delete per object on GCS, so not atomic there.

    .venv/bin/python -m pytest tests/cloud/test_gcs_paths.py
"""
import ast
import json
import os
import pathlib

import pytest
import tensorflow as tf

from common import dataset_files
from trainer import task
from trainer.run import eval_records
from trainer.run import params_file
from trainer.data import dataset_info
from trainer.export import contract
from tests.trainer.conftest import TINY_FLAGS, as_argv

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The modules a training job runs: trainer/ and the shared contracts it imports. Not
# common/image_uris.py: it opens a path with the builtin open only when it has no
# scheme, and hands gs:// and other URIs to the caller's opener (tf.io.gfile here);
# nor common/beam_pipeline.py, which only the Beam pipelines import.
# Nor trainer/report/page.py: the report is a workstation command that prints a file:// URL for
# a browser (it reads the run through tf.io.gfile like the rest). Nor common/console.py:
# its only path is its own location (which log records come from this project).
# Nor common/export_versions.py: it reads local paths with os and hands every URL (gs://
# included) to Beam's FileSystems, which reads the GCS emulator where tf.io.gfile cannot
# (tests/common/test_export_versions.py runs it on both). Nor common/prediction_records.py,
# for the same reason: --mode predict publishes through Beam's FileSystems (its one local
# call, glob for local staging folders, which Beam's match does not list), tested on the
# emulator (tests/trainer/test_predict_lock.py). Nor common/output_lock.py: its local lock
# is flock(2) on a local file by design; gs:// takes an object lock through the GCS client.
# Nor trainer/export_tflite.py's entry module: the SavedModel it exports from a checkpoint is
# local scratch (a temporary directory, as the TFLite converter reads it) and its --checkpoint
# path is compared with OUT as text after abspath; the run it reads and the models it writes
# go through tf.io.gfile in trainer/export/tflite*.py, which this test holds.
# Nor trainer/settings/early_check.py: it runs before TensorFlow loads and only on local paths
# (a gs:// --output_dir or --config is left to the chain, which reads it through tf.io.gfile).
NOT_JOB_SOURCES = ("common/image_uris.py", "common/beam_pipeline.py", "trainer/report/page.py",
                   "common/console.py", "common/export_versions.py",
                   "common/prediction_records.py", "common/output_lock.py", "trainer/export_tflite.py",
                   "trainer/settings/early_check.py")
# Functions only a command line's main() calls, on files named on that command line.
# common/warmup.py's read_files: python -m common.warmup; trainer/data/augment.py's read_args:
# its command's IMAGE, judged before TensorFlow loads where it is local (gs:// left to TensorFlow).
CLI_FUNCTIONS = {"main", "read_files", "read_args"}
JOB_SOURCES = [path for path in sorted(ROOT.glob("trainer/**/*.py")) + sorted(ROOT.glob("common/*.py"))
               if path.relative_to(ROOT).as_posix() not in NOT_JOB_SOURCES]
LOCAL_ONLY_CALLS = {
    "open", "os.listdir", "os.makedirs", "os.mkdir", "os.remove", "os.unlink", "os.rename",
    "os.replace", "os.walk", "os.stat", "os.scandir", "os.path.exists", "os.path.isdir",
    "os.path.isfile", "os.path.getsize", "os.path.abspath", "os.path.realpath",
}
LOCAL_ONLY_MODULES = {"shutil", "glob", "pathlib", "tempfile"}


def dotted_name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def local_file_operations(path):
    """(line, call) of every local-only file operation outside the CLI_FUNCTIONS."""
    tree = ast.parse(path.read_text(), str(path))
    cli_nodes = {id(node) for fn in ast.walk(tree)
                 if isinstance(fn, ast.FunctionDef) and fn.name in CLI_FUNCTIONS for node in ast.walk(fn)}
    found = []
    for node in ast.walk(tree):
        if id(node) in cli_nodes:
            continue
        if isinstance(node, ast.Call):
            name = dotted_name(node.func) or ""
            if name in LOCAL_ONLY_CALLS or name.split(".")[0] in LOCAL_ONLY_MODULES:
                found.append((node.lineno, name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
            found += [(node.lineno, f"import {m}") for m in modules if m.split(".")[0] in LOCAL_ONLY_MODULES]
    return found


def test_the_check_finds_local_file_operations(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os, shutil\nopen('x')\nos.path.exists('y')\nshutil.copy('a', 'b')\n"
                      "def main():\n    open('cli-only')\n")
    assert local_file_operations(sample) == [(1, "import shutil"), (2, "open"),
                                             (3, "os.path.exists"), (4, "shutil.copy")]


@pytest.mark.parametrize("path", JOB_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_job_code_uses_only_tf_io_gfile_for_files(path):
    assert local_file_operations(path) == [], f"{path.relative_to(ROOT)}: use tf.io.gfile instead"


def test_this_tensorflow_has_its_gcs_filesystem():
    assert "gs" in tf.io.gfile.get_registered_schemes()


@pytest.mark.parametrize("base", ["/data/digits", "gs://my-bucket/data/digits"])
def test_path_arithmetic_keeps_the_scheme(base):
    pattern = f"{base}/train-*"
    assert dataset_files.dataset_dir_of(pattern) == base
    assert dataset_info.split_of(pattern, {"splits": {"train": {}, "eval": {}}}) == "train"
    assert os.path.dirname(os.path.join(base, "export", "m", "5")) == f"{base}/export/m"


def copy_tree(source, target):
    """Copies the files of a local directory to a TF filesystem URL."""
    tf.io.gfile.makedirs(target)
    for name in os.listdir(source):
        tf.io.gfile.copy(os.path.join(source, name), f"{target}/{name}", overwrite=True)


@pytest.mark.trains
def test_every_input_read_from_a_non_local_filesystem(tiny_dataset, tmp_path):
    remote = f"ram://{tmp_path.name}/data"
    copy_tree(tiny_dataset, remote)
    out = str(tmp_path / "out")
    argv = as_argv(dict(TINY_FLAGS, train_data_path=f"{remote}/train-*",
                        eval_data_path=f"{remote}/eval-*", output_dir=out))
    exported = task.main(argv)
    assert exported == os.path.join(out, "export", "image_classifier", "4")
    contract.check_export(exported)
    params = json.loads(pathlib.Path(out, "params.json").read_text())
    assert params["num_train_examples"] == 24 and params["num_eval_examples"] == 11
    warmup = pathlib.Path(exported, "assets.extra", "tf_serving_warmup_requests")
    assert warmup.stat().st_size > 0  # made of eval JPEGs read from ram://


def test_trainer_output_files_on_a_non_local_filesystem(tiny_params, tmp_path):
    out = f"ram://{tmp_path.name}/run"
    params = dict(tiny_params, output_dir=out)
    assert params_file.write_params(params) == f"{out}/params.json"
    assert params_file.read_saved_params(out)["output_dir"] == out
    for step in (2, 4):
        eval_records.append_eval_result(out, {"global_step": step, "accuracy": step / 10})
    assert [r["global_step"] for r in eval_records.read_eval_results(out)] == [2, 4]
    assert sorted(tf.io.gfile.listdir(out)) == ["eval_results.jsonl", "params.json"]
