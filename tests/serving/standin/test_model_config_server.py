"""--model_config_file: several models, version policies, labels, reloading; and the flags'
start-up mistakes, each one "error:" line and exit code 2.

    .venv/bin/python -m pytest tests/serving/standin/test_model_config_server.py
"""
import os
import shutil
import time

import pytest

from serving.rest_client import RestClient, ServerError
from serving.standin import server
from tests.serving.conftest import wait_for

POLL_SECONDS = 0.1


def model_entry(name, base, policy="", labels=()):
    label_text = "".join(f' version_labels {{ key: "{k}" value: {v} }}' for k, v in labels)
    policy_text = f" model_version_policy {{ {policy} }}" if policy else ""
    return (f'config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow"'
            f"{policy_text}{label_text} }}")


def write_config(path, *entries):
    replace_text(path, "model_config_list { " + " ".join(entries) + " }")


def replace_text(path, text):
    """Writes aside, then renames, as a config file should be rewritten: the server's poll
    never reads it half written (truncated to empty, a valid config with no models, it
    once unloaded every model in a CI run under load)."""
    aside = path.with_name(path.name + ".aside")
    aside.write_text(text)
    os.replace(aside, path)




def states(client):
    try:
        return [(s["version"], s["state"]) for s in client.status()["model_version_status"]]
    except ServerError as e:
        return str(e)


@pytest.fixture(scope="module")
def three_versions(tmp_path_factory, save_tiny_model):
    base = tmp_path_factory.mktemp("config") / "image_classifier"
    for version in (1, 2, 3):
        save_tiny_model(base / str(version), seed=version)
    return base


def test_a_config_file_serves_several_models_and_reloads(tmp_path, three_versions, sample_jpegs):
    """Start: model a (versions 1 and 2) and b (latest). Reload: a gains label `stable` on an
    AVAILABLE version, b leaves (its versions END), c arrives; a bad rewrite changes nothing."""
    config = tmp_path / "models.config"
    write_config(config, model_entry("a", three_versions, "specific { versions: 1 versions: 2 }"),
                 model_entry("b", three_versions))
    running = server.start(server.ServerOptions(
        server.config_files.read_model_server_config(str(config)), poll_seconds=POLL_SECONDS,
        enable_warmup=False, model_config_file=str(config), config_poll_seconds=POLL_SECONDS))
    clients = {name: RestClient(f"http://127.0.0.1:{running.rest_port}", name) for name in "abc"}
    try:
        assert states(clients["a"]) == [("2", "AVAILABLE"), ("1", "AVAILABLE")]
        assert states(clients["b"]) == [("3", "AVAILABLE")]
        write_config(config, model_entry("a", three_versions, "specific { versions: 1 versions: 2 }",
                                         labels=[("stable", 1)]),
                     model_entry("c", three_versions, "all { }"))
        assert wait_for(lambda: states(clients["c"]) == [("3", "AVAILABLE"), ("2", "AVAILABLE"),
                                                         ("1", "AVAILABLE")])
        assert states(clients["b"]) == [("3", "END")]
        with pytest.raises(ServerError, match=r"Servable not found for request: Latest\(b\)"):
            clients["b"].predict(sample_jpegs[:1])
        stable = clients["a"].request("GET", "/v1/models/a/labels/stable/metadata")
        assert stable["model_spec"]["version"] == "1"
        replace_text(config, "model_config_list { config { nme: 'broken' } }")
        time.sleep(5 * POLL_SECONDS)  # several polls over a bad file: logged, nothing changes
        assert clients["a"].request("GET", "/v1/models/a/labels/stable/metadata")["model_spec"][
            "version"] == "1"
        assert states(clients["c"])[0] == ("3", "AVAILABLE")
    finally:
        for client in clients.values():
            client.close()
        running.stop()


def test_a_model_dropped_from_the_config_stays_unloaded_when_an_old_poll_refreshes_it(three_versions):
    """The base-path poller iterates the stores it took before a reload: a refresh of the
    dropped model's store after its retirement must not load its versions again (it did, under
    load in a CI run: the dropped model was reported AVAILABLE, its memory held)."""
    from serving.standin import model_store
    store = model_store.ModelStore("b", str(three_versions), enable_warmup=False)
    assert store.refresh().version == 3
    store.retire()
    assert store.refresh() is None and store.latest() is None
    assert {v: status[0] for v, status in store.statuses().items()} == {3: model_store.END}


def test_a_label_may_not_move_to_a_version_that_is_not_loaded(tmp_path, three_versions):
    """TF Serving's rule on reload: the label keeps its old version and the error is logged."""
    config = tmp_path / "models.config"
    entry = lambda labels: model_entry("a", three_versions, "specific { versions: 1 }", labels)
    write_config(config, entry([("stable", 1)]))
    running = server.start(server.ServerOptions(
        server.config_files.read_model_server_config(str(config)), enable_warmup=False,
        allow_unavailable_labels=True))
    try:
        write_config(config, entry([("stable", 3)]))
        assert running.core.reload_config_file(str(config)) is False
        assert running.core.get("a", label="stable").version == 1
    finally:
        running.stop()


def test_a_deleted_version_under_policy_all_is_reported_end(tmp_path, save_tiny_model):
    base = tmp_path / "m"
    for version in (1, 2):
        save_tiny_model(base / str(version), seed=version)
    config = tmp_path / "models.config"
    write_config(config, model_entry("m", base, "all { }"))
    running = server.start(server.ServerOptions(
        server.config_files.read_model_server_config(str(config)), poll_seconds=POLL_SECONDS,
        enable_warmup=False))
    client = RestClient(f"http://127.0.0.1:{running.rest_port}", "m")
    try:
        shutil.rmtree(base / "1")
        assert wait_for(lambda: states(client) == [("2", "AVAILABLE"), ("1", "END")])
    finally:
        client.close()
        running.stop()


@pytest.mark.parametrize("make_args, words", [
    (lambda d: [], "--model_base_path and --model_config_file are both empty; pass one"),
    (lambda d: ["--model_config_file", str(d / "missing.config")],
     "--model_config_file=.*missing.config: cannot read it"),
    (lambda d: ["--model_config_file", write(d / "m.config", "model_config_list { config { x: 1 } }")],
     "Invalid protobuf file"),
    (lambda d: ["--model_config_file", write(d / "m.config", "model_config_list { " + model_entry(
        "a", d, labels=[("stable", 1)]) + " }")],
     "FAILED_PRECONDITION: Request to assign label to version 1 of model a, which is not currently "
     "available for inference"),
    (lambda d: ["--model_base_path", str(d), "--batching_parameters_file", str(d / "b.txt")],
     "--batching_parameters_file is set without --enable_batching=true"),
    (lambda d: ["--model_base_path", write(d / "image_classifier" / "1" / "saved_model.pb", "")
                .rsplit("/", 3)[0]],  # the export root, one folder above the model's base
     r"holds no numbered version directory, but .*/image_classifier does: did you mean "
     r"--model_base_path=.*/image_classifier\?"),
    (lambda d: ["--model_base_path", str(d), "--enable_batching", "--batching_parameters_file",
                write(d / "b.txt", "max_batch_size { value: 4 } allowed_batch_sizes: 2")],
     "final entry in allowed_batch_sizes must equal max_batch_size"),
    (lambda d: ["--model_base_path", str(d), "--monitoring_config_file", write(d / "m.txt", "x")],
     "--monitoring_config_file=.*Invalid protobuf file"),
])
def test_startup_mistakes_are_one_error_line_and_exit_code_2(tmp_path, capsys, make_args, words):
    with pytest.raises(SystemExit) as raised:
        server.main(make_args(tmp_path) + ["--port", "0", "--rest_api_port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert raised.value.code == 2
    assert len(err) == 1 and err[0].startswith("error: ")
    assert __import__("re").search(words, err[0]), err[0]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)
