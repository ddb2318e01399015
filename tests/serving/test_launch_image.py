"""serving.launch runs the TF Serving image built on the TensorFlow that wrote the export.

Each case runs the real command (`python -m serving.launch ... --dry_run`) on an export
whose saved_model.pb records a chosen TensorFlow: the fixture SavedModel written here by
this environment's TensorFlow (2.15 in .venv, 2.20 in .venv-keras), or a copy of its
saved_model.pb with meta_info_def.tensorflow_version rewritten through TensorFlow's own
proto. The reader (serving/export_tensorflow.py, no TensorFlow import) is checked against
that proto. The Keras engine's real export from TensorFlow 2.20, and whether TensorFlow
2.15 serves it: tests/serving/test_cross_version_export.py.

    .venv/bin/python -m pytest tests/serving/test_launch_image.py
    .venv-keras/bin/python -m pytest tests/serving/test_launch_image.py
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import saved_model_pb2

from serving import export_tensorflow, launch

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The TF Serving Docker tags that exist for the two environments' TensorFlow (the spec, not
# launch.TF_SERVING_IMAGES read back).
IMAGE_2_15 = "tensorflow/serving:2.15.1"
IMAGE_2_20 = "tensorflow/serving:2.20.0"


def read_saved_model(path):
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(pathlib.Path(path).read_bytes())
    return saved_model


def export_written_by(tmp_path, source_base, tensorflow_version):
    """tmp_path/image_classifier/1/saved_model.pb: source's, recording tensorflow_version."""
    saved_model = read_saved_model(source_base / "1" / "saved_model.pb")
    for meta_graph in saved_model.meta_graphs:
        meta_graph.meta_info_def.tensorflow_version = tensorflow_version
    version_dir = tmp_path / "image_classifier" / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "saved_model.pb").write_bytes(saved_model.SerializeToString())
    return version_dir.parent


def run_launch(base, *flags):
    """`python -m serving.launch --model_base_path BASE --dry_run FLAGS` (Docker unless flags say)."""
    flags = flags if "--server" in flags else ("--server", "docker") + flags
    return subprocess.run([sys.executable, "-m", "serving.launch", "--model_base_path", str(base),
                           "--dry_run", *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)


def launched(result):
    """(the line about the export's TensorFlow, the command started) of a dry run that succeeded."""
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    written_by, starting = result.stdout.splitlines()[:2]
    assert starting.startswith("serving.launch: starting "), result.stdout
    return written_by, starting.split(": ", 2)[2]


@pytest.mark.process
def test_an_export_written_here_gets_the_image_of_this_tensorflow(tiny_export_base):
    here = tf.__version__
    expected = {"2.15": IMAGE_2_15, "2.20": IMAGE_2_20}[here.rsplit(".", 1)[0]]
    assert read_saved_model(tiny_export_base / "1" / "saved_model.pb").meta_graphs[0] \
        .meta_info_def.tensorflow_version == here
    written_by, command = launched(run_launch(tiny_export_base))
    assert written_by == f"serving.launch: the export (version 1) was written by TensorFlow {here}: image {expected}"
    assert command.split()[-1] == expected


@pytest.mark.parametrize("recorded, image, why", [
    ("2.15.1", IMAGE_2_15, ""),
    ("2.15.0", IMAGE_2_15, ""),
    ("1.15.5", IMAGE_2_15, " (the oldest known built on TensorFlow 1.15 or newer)"),
    ("2.16.2", IMAGE_2_20, " (the oldest known built on TensorFlow 2.16 or newer)"),
    ("2.19.1", IMAGE_2_20, " (the oldest known built on TensorFlow 2.19 or newer)"),
    ("2.20.0", IMAGE_2_20, ""),
    ("2.20.1-rc0", IMAGE_2_20, ""),
])
@pytest.mark.process
def test_the_image_is_the_oldest_built_on_the_exports_tensorflow_or_newer(
        tiny_export_base, tmp_path, recorded, image, why):
    written_by, command = launched(run_launch(export_written_by(tmp_path, tiny_export_base, recorded)))
    assert written_by == (f"serving.launch: the export (version 1) was written by TensorFlow "
                          f"{recorded}: image {image}{why}")
    assert command.split()[-1] == image


@pytest.mark.parametrize("recorded, says", [
    ("", "records no TensorFlow version"),
    ("unknown", "records TensorFlow 'unknown', not a version number"),
])
@pytest.mark.process
def test_an_export_without_a_tensorflow_version_gets_the_oldest_image(tiny_export_base, tmp_path,
                                                                     recorded, says):
    written_by, command = launched(run_launch(export_written_by(tmp_path, tiny_export_base, recorded)))
    assert written_by == (f"serving.launch: the export (version 1) {says}: image {IMAGE_2_15} "
                          "(the oldest known; pass --docker_image to choose another)")
    assert command.split()[-1] == IMAGE_2_15


@pytest.mark.parametrize("recorded", ["2.21.0", "3.0.0"])
@pytest.mark.process
def test_an_export_newer_than_every_image_is_refused_in_one_line(tiny_export_base, tmp_path, recorded):
    base = export_written_by(tmp_path, tiny_export_base, recorded)
    result = run_launch(base)
    minor = re.match(r"\d+\.\d+", recorded)[0]
    assert (result.returncode, result.stdout) == (2, "")  # nothing started, nothing planned
    assert result.stderr.splitlines() == [
        f"error: {base}/1 was written by TensorFlow {recorded}, newer than the newest TF Serving "
        f"image known here ({IMAGE_2_20}, TensorFlow 2.20); pass --docker_image "
        f"tensorflow/serving:TAG of a release built on TensorFlow {minor} or newer "
        "(github.com/tensorflow/serving/releases), or export it again with TensorFlow 2.20 "
        "(.venv-keras, --engine keras)"]


@pytest.mark.process
def test_docker_image_overrides_the_choice(tiny_export_base, tmp_path):
    base = export_written_by(tmp_path, tiny_export_base, "2.21.0")
    written_by, command = launched(run_launch(base, "--docker_image", "example/serving:2.21.0"))
    assert written_by == ("serving.launch: the export (version 1) was written by TensorFlow 2.21.0: "
                          "image example/serving:2.21.0 (--docker_image)")
    assert command.split()[-1] == "example/serving:2.21.0"


@pytest.mark.parametrize("server, note", [
    ("tensorflow_model_server", "; note: the TensorFlow of tensorflow_model_server is not checked: "
                                "it should be 2.21 or newer (tensorflow_model_server --version says)"),
    ("standin", f"; the stand-in runs this environment's TensorFlow {tf.__version__}, older than the "
                "export's: TensorFlow promises no forward compatibility"),
])
@pytest.mark.process
def test_the_other_servers_start_on_a_newer_export_with_a_note(tiny_export_base, tmp_path, server, note):
    base = export_written_by(tmp_path, tiny_export_base, "2.21.0")
    written_by, command = launched(run_launch(base, "--server", server))
    assert written_by.startswith(f"serving.launch: the export (version 1) was written by TensorFlow "
                                 f"2.21.0{note}")
    assert "tensorflow/serving" not in command and "docker" not in command


def truncated(data):
    return data[:len(data) // 2]


@pytest.mark.parametrize("make_bytes, says", [
    (truncated, "is not a SavedModel that protobuf can parse ("),
    (lambda data: b"not a protobuf\n", "is not a SavedModel that protobuf can parse ("),
    (lambda data: b"\x89PNG\r\n\x1a\n" + bytes(16), "is not a SavedModel that protobuf can parse ("),
    (lambda data: b"", "holds no meta graph (0 bytes), so nothing can serve it; export it again"),
], ids=["truncated", "text", "png", "empty"])
@pytest.mark.parametrize("server", ["docker", "standin"])
@pytest.mark.process
def test_a_saved_model_pb_that_cannot_be_parsed_is_one_line(tiny_export_base, tmp_path, make_bytes,
                                                            says, server):
    version_dir = tmp_path / "image_classifier" / "1"
    version_dir.mkdir(parents=True)
    data = make_bytes((tiny_export_base / "1" / "saved_model.pb").read_bytes())
    (version_dir / "saved_model.pb").write_bytes(data)
    if "parse" in says:  # TensorFlow's own proto refuses the same bytes
        with pytest.raises(DecodeError):
            saved_model_pb2.SavedModel().ParseFromString(data)
    result = run_launch(version_dir.parent, "--server", server)
    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {version_dir}/saved_model.pb {says}")


def saved_model_of(*meta_infos):
    """A SavedModel's bytes with one meta graph per entry: None (no meta_info_def) or a version."""
    saved_model = saved_model_pb2.SavedModel(saved_model_schema_version=1)
    for version in meta_infos:
        meta_graph = saved_model.meta_graphs.add()
        meta_graph.graph_def.node.add(name="x", op="Const")
        if version is not None:
            meta_graph.meta_info_def.tensorflow_version = version
            meta_graph.meta_info_def.tags.append("serve")
            meta_graph.meta_info_def.tensorflow_git_version = "v0.0.0-0-g0"
    return saved_model.SerializeToString()


@pytest.mark.parametrize("make_bytes", [
    lambda export: (export / "1" / "saved_model.pb").read_bytes(),  # a real export, written here
    lambda export: saved_model_of("2.20.0", "2.15.1"),  # two meta graphs: the first one's
    lambda export: saved_model_of(None, "2.15.1"),  # the first without meta_info_def: ""
    lambda export: saved_model_of("2.21.0-rc0"),
], ids=["written_here", "two_meta_graphs", "no_meta_info_def", "one_meta_graph"])
def test_the_reader_agrees_with_tensorflows_proto(tiny_export_base, make_bytes):
    data = make_bytes(tiny_export_base)
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(data)
    expected = saved_model.meta_graphs[0].meta_info_def.tensorflow_version
    assert export_tensorflow.parse_tensorflow_version(data, "saved_model.pb") == expected
    assert expected in ("", tf.__version__, "2.20.0", "2.21.0-rc0")


def locked_version(lock, package):
    (version,) = re.findall(rf"^{re.escape(package)}==(\S+)", (ROOT / lock).read_text(), flags=re.M)
    return version


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-keras.lock"])
def test_each_environments_tensorflow_has_its_own_tf_serving_image(lock):
    """An export from either environment gets the image of its very TensorFlow, whose tag is
    the same release as the environment's tensorflow-serving-api."""
    image, why = launch.choose_docker_image(locked_version(lock, "tensorflow"), "an export")
    assert why == ""
    assert image == f"tensorflow/serving:{locked_version(lock, 'tensorflow-serving-api')}"
