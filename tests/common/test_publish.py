"""The one way to publish a folder (common/publish.py): the folder appears whole or not at all, an
earlier one is replaced whole or kept; a failure (an exception, Ctrl-C) leaves nothing beside it;
a real command killed with SIGKILL at each step of its publish leaves no folder or a whole one;
and no other module renames a folder into place itself. Not on another TF file system: TF's GCS
one cannot be pointed at the tests' emulator, and ram:// renames a folder's own entry without
its files (TF's GCS file system renames every object below it).

    .venv/bin/python -m pytest tests/common/test_publish.py
"""
import ast
import contextlib
import functools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from common import publish
from serving.k8s import output
from tests import user_commands

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILE_SYSTEMS = {"gfile": publish.GFiles, "local": output.LocalFiles}


def write_files(folder, texts):
    for name, text in texts.items():
        with tf.io.gfile.GFile(f"{folder}/{name}", "w") as f:
            f.write(text)


def read_files(folder):
    return {name: tf.io.gfile.GFile(f"{folder}/{name}").read() for name in tf.io.gfile.listdir(folder)}


def publish_texts(destination, texts, **options):
    with publish.folder(destination, **options) as stage:
        write_files(stage.path, texts)


@pytest.mark.parametrize("files", FILE_SYSTEMS.values(), ids=FILE_SYSTEMS)
def test_a_folder_appears_whole_and_replaces_an_earlier_one_whole(files, tmp_path):
    destination = str(tmp_path / "out" / "k8s")
    publish_texts(destination, {"a.yaml": "old\n", "b.yaml": "old\n"}, replace=True, files=files)
    assert read_files(destination) == {"a.yaml": "old\n", "b.yaml": "old\n"}
    publish_texts(destination, {"a.yaml": "new\n"}, replace=True, files=files)
    assert read_files(destination) == {"a.yaml": "new\n"}
    assert os.listdir(tmp_path / "out") == ["k8s"]  # no staging or old folder left beside it


def test_an_existing_folder_is_kept_without_replace(tmp_path):
    destination = str(tmp_path / "5")
    publish_texts(destination, {"saved_model.pb": "first"})
    with pytest.raises(FileExistsError, match="5 exists; it is not replaced"):
        publish_texts(destination, {"saved_model.pb": "second"})
    assert read_files(destination) == {"saved_model.pb": "first"}
    assert os.listdir(tmp_path) == ["5"]


@pytest.mark.parametrize("stop", [ValueError("bad export"), KeyboardInterrupt(), SystemExit(143)],
                         ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("is_there_before", [False, True])
def test_a_failed_block_publishes_nothing_and_leaves_nothing(stop, is_there_before, tmp_path):
    destination = str(tmp_path / "tflite")
    if is_there_before:
        publish_texts(destination, {"model.tflite": "old"})
    with pytest.raises(type(stop)):
        with publish.folder(destination, replace=True) as stage:
            write_files(stage.path, {"model.tflite": "half"})
            raise stop
    assert os.listdir(tmp_path) == (["tflite"] if is_there_before else [])
    if is_there_before:
        assert read_files(destination) == {"model.tflite": "old"}


def test_a_failed_rename_puts_the_earlier_folder_back(monkeypatch, tmp_path):
    destination = str(tmp_path / "k8s")
    publish_texts(destination, {"1-configmap.yaml": "old\n"})
    rename = tf.io.gfile.rename

    def failing_rename(source, target, overwrite=False):
        if ".staging-" in source:
            raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
        rename(source, target, overwrite)
    monkeypatch.setattr(tf.io.gfile, "rename", failing_rename)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        publish_texts(destination, {"1-configmap.yaml": "new\n", "2-deployment.yaml": "new\n"}, replace=True)
    assert os.listdir(tmp_path) == ["k8s"] and read_files(destination) == {"1-configmap.yaml": "old\n"}


def test_a_folder_a_writer_made_below_the_stage_is_what_is_published(tmp_path):
    """As an engine's SavedModel writer does: it makes STAGE/<timestamp>/ itself."""
    destination = str(tmp_path / "export" / "7")
    with publish.folder(destination) as stage:
        stage.content = f"{stage.path}/1700000000"
        tf.io.gfile.makedirs(stage.content)
        write_files(stage.content, {"saved_model.pb": "graph"})
    assert read_files(destination) == {"saved_model.pb": "graph"}
    assert os.listdir(tmp_path / "export") == ["7"]


def test_leftovers_of_killed_publishes_of_that_folder_only_are_cleared(tmp_path):
    for name in (".5.staging-0badf00d", ".5.staging-12345678", ".50.staging-0badf00d", ".6.staging-aa"):
        (tmp_path / name / "variables").mkdir(parents=True)
    destination = str(tmp_path / "5")
    assert publish.leftovers(destination) == [str(tmp_path / ".5.staging-0badf00d"),
                                              str(tmp_path / ".5.staging-12345678")]
    publish_texts(destination, {"saved_model.pb": "graph"}, clear_leftovers=True)
    assert sorted(os.listdir(tmp_path)) == [".50.staging-0badf00d", ".6.staging-aa", "5"]


def test_a_replace_killed_between_its_renames_is_put_back_by_the_next_publish(tmp_path):
    """Killed after the old folder was set aside and before the new one came in: the next
    publisher (clearing leftovers) puts the old one back first, then replaces it whole."""
    publish_texts(str(tmp_path / "k8s"), {"a.yaml": "earlier"})
    (tmp_path / "k8s").rename(tmp_path / ".k8s.old-0badf00d")  # what the kill left
    publish.remove_leftovers(str(tmp_path / "k8s"))
    assert os.listdir(tmp_path) == ["k8s"] and read_files(tmp_path / "k8s") == {"a.yaml": "earlier"}
    publish_texts(str(tmp_path / "k8s"), {"b.yaml": "new"}, replace=True)
    (tmp_path / ".k8s.old-12345678").mkdir()  # killed after both renames: the new one is in place
    publish_texts(str(tmp_path / "k8s"), {"c.yaml": "newest"}, replace=True, clear_leftovers=True)
    assert os.listdir(tmp_path) == ["k8s"] and read_files(tmp_path / "k8s") == {"c.yaml": "newest"}


def test_several_folders_set_aside_without_the_destination_are_left_for_a_person(tmp_path):
    for name in (".k8s.old-0badf00d", ".k8s.old-12345678"):
        (tmp_path / name).mkdir()
    publish.remove_leftovers(str(tmp_path / "k8s"))
    assert sorted(os.listdir(tmp_path)) == [".k8s.old-0badf00d", ".k8s.old-12345678"]


def test_the_only_publisher_into_a_folder_clears_every_name_s_leftovers(tmp_path):
    """The trainer's export under OUT's lock: a killed export of step 5 goes when step 9 is
    exported, not only when step 5 is exported again."""
    for name in (".5.staging-0badf00d", ".7.staging-12345678", ".7.old-aa"):
        (tmp_path / name / "variables").mkdir(parents=True)
    (tmp_path / "7").mkdir()
    publish.remove_leftovers_in(str(tmp_path))
    assert os.listdir(tmp_path) == ["7"]


# --- a real command killed at each step of its publish ------------------------------------------

# serving.k8s's main(), with each file operation of its publish counted; at the KILL_AT-th the
# process kills itself with SIGKILL (nothing of Python runs after it: no finally, no handler).
# Each run is a fork of one helper interpreter that imported the command once: a fresh process
# per run, as a user's is, without paying the imports per run. The helper has no threads to hand
# down (a fork copies only the forking thread; a lock another thread held stays held), and checks
# it before each fork. One request a line: [kill_at, case, argv] in on its stdin, and out on its
# stdout [returncode (-N: killed by signal N, as subprocess says it), stdout, stderr].
FORKING_K8S = """
import json, os, signal, sys, tempfile, threading, traceback
from google.cloud import storage  # the command imports it on first use (common/gcs_probe.py)
from serving.k8s import __main__ as k8s, output

def counted(operation, kill_at, calls):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return operation(*args, **kwargs)
    return staticmethod(call)

def count_file_operations(kill_at):
    calls = [0]
    for name in ("exists", "makedirs", "rename", "remove_tree"):
        setattr(output.LocalFiles, name, counted(getattr(output.LocalFiles, name), kill_at, calls))
    output.open = counted(open, kill_at, calls).__func__

def run_command(kill_at, case, argv, out, err):
    '''In the fork: the command run in case/ (stdout, stderr into out, err); its exit code, as
    `python -c "sys.exit(k8s.main(argv))"` would end with it.'''
    try:
        os.chdir(case)
        for fd, file in ((0, open(os.devnull)), (1, out), (2, err)):
            os.dup2(file.fileno(), fd)
        signal.alarm(120)  # a run that hangs ends (-SIGALRM), as subprocess.run's timeout ended it
        count_file_operations(kill_at)
        return k8s.main(argv)
    except SystemExit as stop:  # None: 0; a message: printed, 1
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()

def fork_command(kill_at, case, argv, out, err):
    '''The fork's pid. The fork ends in os._exit: nothing of the loop below runs in it, nor the
    interpreter's shutdown (every imported module torn down, slower than the command itself;
    what is checked here is on disk before it).'''
    assert threading.active_count() == 1, f"threads a fork would not have: {threading.enumerate()}"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = run_command(kill_at, case, argv, out, err)
        finally:
            os._exit(code)
    return pid

def read(file):
    file.seek(0)
    return file.read().decode(errors="replace")

for request in sys.stdin:
    kill_at, case, argv = json.loads(request)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    status = os.waitpid(fork_command(kill_at, case, argv, out, err), 0)[1]
    print(json.dumps([os.waitstatus_to_exitcode(status), read(out), read(err)]), flush=True)
    out.close()
    err.close()
"""
K8S_ARGV = ["--model_base_path", "gs://my-bucket/run/export/image_classifier", "--tf_serving_version", "2.20"]
PLAIN_KINDS = ("serviceaccount", "configmap", "deployment", "service", "horizontalpodautoscaler",
               "poddisruptionbudget")
KSERVE_KINDS = ("serviceaccount", "configmap", "inferenceservice", "poddisruptionbudget")


@contextlib.contextmanager
def forking_k8s(home):
    """Yields run(kill_at, case, *flags) (run_forked's), each run a fork of one FORKING_K8S
    helper, started with a user's environment and HOME=home (every case/ is below it)."""
    env = user_commands.user_env(drop=("GOOGLE_APPLICATION_CREDENTIALS",), HOME=home,
                                 PYTHONPATH=ROOT, STORAGE_EMULATOR_HOST="http://127.0.0.1:9")
    with subprocess.Popen([sys.executable, "-c", FORKING_K8S], cwd=home, env=env, text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as helper:
        yield functools.partial(run_forked, helper)


def run_forked(helper, kill_at, case, *flags):
    """The command run in case/ into k8s/ (so each case's files name the same command), its export
    unread at once (Cloud Storage at a closed port: it says so and writes the manifests for
    --tf_serving_version); killed at kill_at (0: never). A CompletedProcess, as subprocess.run's."""
    argv = [*K8S_ARGV, "--output_dir", "k8s", *flags]
    helper.stdin.write(json.dumps([kill_at, str(case), argv]) + "\n")
    helper.stdin.flush()
    answer = helper.stdout.readline()
    assert answer, f"the helper ended ({helper.wait()}): {helper.stderr.read()}"
    return subprocess.CompletedProcess(argv, *json.loads(answer))


def read_output(case):
    """{file: text} of case/k8s/, None without it; leftovers beside it (dot-folders) are not read."""
    folder = case / "k8s"
    return {path.name: path.read_text() for path in folder.iterdir()} if folder.is_dir() else None


@pytest.mark.process
@pytest.mark.parametrize("earlier", [[], ["--kserve"]], ids=["first", "replacing"])
def test_a_command_killed_at_each_step_of_its_publish_leaves_no_folder_or_a_whole_one(earlier, tmp_path):
    """Killed just before its 1st, 2nd, ... file operation until a run ends on its own: each
    finds k8s/ absent, the earlier output (the KServe variant's) whole, or the new one whole."""
    (tmp_path / "earlier").mkdir()
    with forking_k8s(tmp_path) as run_k8s_killed_at:
        if earlier:
            assert run_k8s_killed_at(0, tmp_path / "earlier", *earlier).returncode == 0
        outputs = {"absent": None, "earlier": read_output(tmp_path / "earlier")}
        found = []
        for kill_at in range(1, 40):
            case = tmp_path / f"killed-at-{kill_at}"
            shutil.copytree(tmp_path / "earlier", case)
            killed = run_k8s_killed_at(kill_at, case)
            found.append(read_output(case))
            if killed.returncode == 0:
                break
            assert killed.returncode == -signal.SIGKILL, (kill_at, killed.stderr)
            rerun = run_k8s_killed_at(0, case)  # the same command again: whole, nothing left beside
            assert rerun.returncode == 0 and sorted(os.listdir(case)) == ["k8s"], (kill_at, os.listdir(case))
    outputs["new"] = found[-1]
    assert sorted(outputs["new"]) == [f"{i}-{kind}.yaml" for i, kind in enumerate(PLAIN_KINDS, 1)]
    if earlier:
        assert sorted(outputs["earlier"]) == [f"{i}-{kind}.yaml" for i, kind in enumerate(KSERVE_KINDS, 1)]
    seen = [next((name for name, files in outputs.items() if output == files), None)
            or f"partial: {sorted(output)}" for output in found]
    assert set(seen) == {"absent", "new"} | ({"earlier"} if earlier else set()), seen



# --- no other module renames a folder into place itself ---------------------------------------

# Renames that are no folder published whole, each with its reason: Beam's FileSystems move
# files (a dataset's into OUT beside its lock, predictions into a folder holding the other
# format's; one shard piece to its name) and reach the tests' GCS emulator, which tf.io.gfile
# cannot; eval_records sets superseded exports aside (a move away, not a publish); serving.k8s's
# and common/publish.py's own are the file operations of the one way.
OTHER_RENAMES = {"preprocess/output_dir.py", "preprocess/shards.py", "common/prediction_records.py",
                 "trainer/run/eval_records.py", "serving/k8s/output.py", "common/publish.py",
                 "common/atomic_write.py"}


def renames(path):
    """The lines calling a rename: os's, tf.io.gfile's, Beam's FileSystems', anyone's .rename."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        ast.unparse(node.func) == "os.replace"
        or isinstance(node.func, ast.Attribute) and node.func.attr == "rename")]


def test_no_other_module_renames_a_folder_into_place_itself():
    found = {str(path.relative_to(ROOT)): renames(path)
             for package in ("common", "preprocess", "trainer", "serving", "bench")
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path for path, lines in found.items() if lines} <= OTHER_RENAMES
    assert found["common/publish.py"] and found["trainer/run/eval_records.py"]  # the check finds them
