"""`python -m serving.client` over REST and gRPC: top-k text, --json, an error per bad file.

    .venv/bin/python -m pytest tests/serving/test_client_cli.py
"""
import json

import pytest

from serving import client


@pytest.fixture(scope="module")
def image_files(tmp_path_factory, sample_jpegs):
    """Two good JPEGs, a missing file, a text file, and a truncated JPEG. Read only."""
    tmp_path = tmp_path_factory.mktemp("client_cli")
    good = [tmp_path / "a.jpg", tmp_path / "b.jpg"]
    for path, jpeg in zip(good, sample_jpegs):
        path.write_bytes(jpeg)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "cut.jpg").write_bytes(sample_jpegs[2][:20])
    return [str(good[0]), str(tmp_path / "missing.jpg"), str(tmp_path / "notes.txt"),
            str(tmp_path / "cut.jpg"), str(good[1])]


@pytest.fixture(params=["rest", "grpc"])
def target_args(request, standin):
    if request.param == "rest":
        return ["--server", f"http://127.0.0.1:{standin.rest_port}"]
    return ["--grpc", f"127.0.0.1:{standin.grpc_port}"]


def test_json_output_has_top_k_and_an_error_per_bad_file(target_args, image_files, capsys):
    code = client.main(target_args + ["--model", "image_classifier", "--json", "--top_k", "2",
                                      "--batch_size", "8"] + image_files)
    results = json.loads(capsys.readouterr().out)
    assert code == 1  # some files failed
    assert [r["file"] for r in results] == image_files
    errors = [r["error"] for r in results]
    assert errors[0] is None and errors[4] is None
    assert "cannot read" in errors[1] and "No such file" in errors[1]
    assert "not an image the model decodes" in errors[2]
    assert "HTTP 400" in errors[3] or "INVALID_ARGUMENT" in errors[3]
    for good in (results[0], results[4]):
        probabilities = [t["probability"] for t in good["top_k"]]
        assert len(probabilities) == 2 and probabilities == sorted(probabilities, reverse=True)
        assert good["top_k"][0]["class"] in ("cat", "dog", "fish")


def test_text_output_names_classes_from_labels(target_args, image_files, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\nfish\n")
    code = client.main(target_args + ["--labels", str(labels), image_files[0], image_files[4]])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == 2
    assert lines[0].startswith(image_files[0] + ": ")
    names = [part.split()[0] for part in lines[0].split(": ", 1)[1].split(", ")]
    assert sorted(names) == ["cat", "dog", "fish"]


def test_unknown_model_is_one_clear_error(target_args, image_files, capsys):
    code = client.main(target_args + ["--model", "nope", image_files[0]])
    assert code == 2
    assert "nope" in capsys.readouterr().err


def test_unreachable_server_is_one_clear_error(image_files, capsys):
    code = client.main(["--server", "http://127.0.0.1:9", "--timeout", "2", image_files[0]])
    assert code == 2
    assert "127.0.0.1:9" in capsys.readouterr().err
