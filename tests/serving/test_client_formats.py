"""`python -m serving.client` against a real trained export on the stand-in: every image format
the export decodes is sent (JPEG, PNG, GIF, BMP), anything else is refused per file in one
line, and a labels file whose length is not the model's class count is refused (exit 2).
The client runs in this process (client.main's exit code and printed lines); the real command
only for its one-line refusals.

    .venv/bin/python -m pytest tests/serving/test_client_formats.py
"""
import json
import os

import numpy as np
import pytest

from serving import client
from tests import user_commands
from tests.conftest import LABELS, encode_image, pattern_image

pytestmark = pytest.mark.trains  # trained_standin serves the session's trained_run

DECODED = {"a.jpg": "JPEG", "b.png": "PNG", "c.gif": "GIF", "d.bmp": "BMP"}
REFUSED = {"e.tiff": "TIFF", "f.webp": "WEBP"}  # images, but not what tf.io.decode_image reads


@pytest.fixture(scope="module")
def trained_standin(trained_run):
    """The stand-in serving the tiny trained run's export (tf.io.decode_image inside)."""
    from serving.standin import server
    running = server.start_server("image_classifier", os.path.dirname(str(trained_run[1])),
                                  "127.0.0.1", rest_api_port=0, port=0, poll_seconds=0.5)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    """One file of each format, a gray PNG and a text file. Read only."""
    folder = tmp_path_factory.mktemp("client_images")
    files = {}
    for seed, (name, fmt) in enumerate({**DECODED, **REFUSED}.items()):
        files[name] = folder / name
        files[name].write_bytes(encode_image(pattern_image(20, 20 + seed, seed), fmt=fmt))
    files["gray.png"] = folder / "gray.png"
    files["gray.png"].write_bytes(encode_image(pattern_image(20, 20, 9, channels=1), fmt="PNG"))
    files["notes.txt"] = folder / "notes.txt"
    files["notes.txt"].write_text("hello")
    return files


def target(standin, transport):
    if transport == "rest":
        return ["--server", f"http://127.0.0.1:{standin.rest_port}"]
    return ["--grpc", f"127.0.0.1:{standin.grpc_port}"]


def run_client(standin, transport, capsys, *argv):
    """(exit code, stdout, stderr) of client.main in this process."""
    capsys.readouterr()
    code = client.main([*target(standin, transport), *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_every_format_the_export_decodes_is_classified(trained_standin, image_files, transport,
                                                       capsys):
    code, out, err = run_client(trained_standin, transport, capsys, "--json", *image_files.values())
    by_name = {os.path.basename(r["file"]): r for r in json.loads(out)}
    assert code == 1, err  # some files are refused
    for name in [*DECODED, "gray.png"]:
        assert by_name[name]["error"] is None, by_name[name]
        probabilities = [t["probability"] for t in by_name[name]["top_k"]]
        assert len(probabilities) == 3 and np.isclose(sum(probabilities), 1, atol=1e-5)
        assert {t["class"] for t in by_name[name]["top_k"]} <= set(LABELS) | {"#0", "#1", "#2"}
    for name in [*REFUSED, "notes.txt"]:
        assert by_name[name]["error"].startswith(
            "not an image the model decodes (JPEG, PNG, GIF or BMP): starts with b'"), by_name[name]
        assert by_name[name]["top_k"] == []


def test_refused_files_are_one_line_each_in_text_output(trained_standin, image_files, capsys):
    code, out, _ = run_client(trained_standin, "rest", capsys, image_files["b.png"],
                              image_files["e.tiff"])
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2
    assert lines[0].startswith(f"{image_files['b.png']}: ") and "ERROR" not in lines[0]
    assert lines[1].startswith(f"{image_files['e.tiff']}: ERROR: not an image the model decodes")


def write_labels(tmp_path, names):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{name}\n" for name in names))
    return labels


def class_count_refusal(labels, names):
    return (f"error: --labels {labels} has {len(names)} class names but the model has 3 classes "
            "(the length of its probabilities): pass the labels.txt of the dataset this model was "
            "trained on, or leave --labels out")


@pytest.mark.parametrize("transport", ["rest", "grpc"])
@pytest.mark.parametrize("names", [[f"digit_{i}" for i in range(10)], ["cat", "dog"]])
def test_labels_of_another_class_count_are_refused(trained_standin, image_files, tmp_path,
                                                   transport, names, capsys):
    labels = write_labels(tmp_path, names)
    code, out, err = run_client(trained_standin, transport, capsys, "--labels", labels,
                                image_files["a.jpg"])
    assert (code, out, err.splitlines()) == (2, "", [class_count_refusal(labels, names)])


@pytest.mark.process
def test_the_command_refuses_labels_of_another_class_count_in_one_line(trained_standin,
                                                                       image_files, tmp_path):
    names = ["cat", "dog"]
    labels = write_labels(tmp_path, names)
    # Over REST: the command then loads no TensorFlow (--grpc's stubs do), so it answers in ~1 s.
    result = user_commands.run("serving.client", *target(trained_standin, "rest"), "--labels",
                               labels, image_files["a.jpg"], timeout=120)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [class_count_refusal(labels, names)]


def test_labels_of_the_model_name_every_class(trained_standin, image_files, tmp_path, capsys):
    labels = write_labels(tmp_path, LABELS)
    code, out, _ = run_client(trained_standin, "rest", capsys, "--labels", labels,
                              image_files["c.gif"])
    names = [part.split()[0] for part in out.split(": ", 1)[1].split(", ")]
    assert code == 0 and sorted(names) == sorted(LABELS)


@pytest.mark.process
@pytest.mark.parametrize("argv,message", [
    (["--top_k", "0", "a.jpg"], "error: --top_k=0 and --batch_size=32 must be >= 1"),
    (["--labels", "/nonexistent/labels.txt", "a.jpg"],
     "error: --labels /nonexistent/labels.txt: No such file or directory"),
    (["--lables", "l.txt", "a.jpg"], "error: unrecognized arguments: --lables; did you mean "
                                     "--labels?; see python -m serving.client --help"),
])
def test_mistakes_are_one_line(trained_standin, argv, message):
    result = user_commands.run("serving.client", *target(trained_standin, "rest"), *argv,
                               timeout=120)
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (2, "", [message])
