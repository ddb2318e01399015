"""The launcher's choice of server, and the demo's start -> classify -> stop on the stand-in;
neither uses a server that already holds a port (a "foreign" one here).

    .venv/bin/python -m pytest tests/serving/test_launch_and_demo.py
"""
import concurrent.futures
import contextlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

from serving import demo, launch

from serving.standin import server
from tests.conftest import free_port


def write_fake_tool(directory, name, exit_code=0):
    path = directory / name
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(0o755)


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    """An empty PATH directory that tests fill with fake docker / tensorflow_model_server."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


@pytest.mark.parametrize("tools, expected", [
    ({}, "standin"),
    ({"docker": 1}, "standin"),                      # a docker CLI whose engine does not answer
    ({"docker": 1, "tensorflow_model_server": 0}, "tensorflow_model_server"),
    ({"docker": 0, "tensorflow_model_server": 0}, "docker"),
])
@pytest.mark.process
def test_launcher_prefers_tf_serving_and_says_which(fake_path, tmp_path, capsys, tools, expected):
    for name, exit_code in tools.items():
        write_fake_tool(fake_path, name, exit_code)
    assert launch.main(["--model_base_path", str(tmp_path), "--dry_run"]) == 0
    written_by, starting = capsys.readouterr().out.splitlines()[:2]
    assert written_by.startswith(f"serving.launch: {tmp_path} holds no version yet")
    assert starting.startswith(f"serving.launch: starting {expected} (")
    if expected == "standin":
        assert "not TF Serving" in starting


def test_launch_commands_bind_loopback_and_name_the_model(tmp_path):
    base = tmp_path / "my_model"
    base.mkdir()
    args = launch.build_parser().parse_args(["--model_base_path", str(base),
                                             "--docker_image", "tensorflow/serving:2.15.1"])
    docker = launch.docker_command(args, str(base), "my_model")
    assert "127.0.0.1:8501:8501" in docker and "127.0.0.1:8500:8500" in docker
    assert f"type=bind,source={base},target=/models/my_model,readonly" in docker
    assert "MODEL_NAME=my_model" in docker and docker[-1] == "tensorflow/serving:2.15.1"
    assert launch.binary_command(args, str(base), "my_model")[1:] == [
        "--port=8500", "--rest_api_port=8501", "--model_name=my_model", f"--model_base_path={base}"]
    assert "--host=127.0.0.1" in launch.standin_command(args, str(base), "my_model")


def test_launcher_rejects_a_missing_directory(tmp_path, capsys):
    with pytest.raises(SystemExit, match="^2$"):
        launch.main(["--model_base_path", str(tmp_path / "missing"), "--dry_run"])
    assert re.search(r"^error: --model_base_path=.*missing.* is not a directory",
                     capsys.readouterr().err)


@pytest.mark.process
def test_launcher_takes_the_highest_version_directory_for_its_base(tiny_export_base, capsys):
    base = str(tiny_export_base)
    assert launch.main(["--model_base_path", f"{base}/1", "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert f"{base}/1 is version 1, the highest of {base}: serving {base}" in out
    assert f"--model_base_path={base} " in out or out.rstrip().endswith(f"--model_base_path={base}")


def test_launcher_refuses_a_version_that_is_not_the_highest(tiny_export_base, tmp_path, capsys):
    base = tmp_path / "image_classifier"
    shutil.copytree(tiny_export_base / "1", base / "1")
    shutil.copytree(tiny_export_base / "1", base / "2")
    with pytest.raises(SystemExit, match="^2$"):
        launch.main(["--model_base_path", str(base / "1"), "--dry_run"])
    assert "TF Serving serves the highest version of its base (2 in" in capsys.readouterr().err


def test_server_help_calls_itself_a_stand_in():
    text = " ".join(server.build_parser().format_help().split())
    assert "stand-in" in text and "Not a replacement for TF Serving" in text


def run_in_own_session(argv, timeout, **kwargs):
    """subprocess.run, but a timeout kills the whole process group (the server included)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.process
def test_demo_starts_classifies_and_stops_the_standin(tiny_export_base, sample_jpegs, tmp_path):
    """The real entry points in subprocesses: demo -> launch -> serving.standin.server, then SIGTERM."""
    images = []
    for i, jpeg in enumerate(sample_jpegs[:3]):
        images.append(tmp_path / f"held_out_{i}.jpg")
        images[-1].write_bytes(jpeg)
    env = dict(os.environ, PATH=str(tmp_path))  # no docker, no tensorflow_model_server
    result = run_in_own_session(
        [sys.executable, "-m", "serving.demo", "--model_base_path", str(tiny_export_base),
         "--rest_api_port", str(free_port()), "--port", str(free_port())] + [str(p) for p in images],
        cwd=os.path.dirname(os.path.dirname(demo.__file__)), env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("serving.launch: starting standin (") for line in lines)
    assert any("development stand-in" in line and "version 1" in line for line in lines)
    classified = [line for line in lines if line.startswith(str(tmp_path))]
    assert len(classified) == 3, result.stdout[-2000:]
    assert all(len(line.split(": ", 1)[1].split(", ")) == 3 for line in classified), (
        result.stdout[-2000:], result.stderr[-2000:])
    assert "serving.standin.server: stopped" in result.stdout
    assert lines[-1] == "serving.demo: server stopped (exit code 0)"
    # the stand-in's log lines start with its name, as the launcher's and the demo's lines do
    warm_up = (rf"serving\.standin\.server: model image_classifier: serving version 1 from "
               rf"{re.escape(str(tiny_export_base))}/1 \(\d+ warmup requests replayed\)")
    assert [bool(re.fullmatch(warm_up, line)) for line in result.stderr.splitlines()] == [True]


class ForeignHandler(http.server.BaseHTTPRequestHandler):
    """Answers as TF Serving would for any model name, version 1, always class "foreign"."""

    def do_GET(self):
        name = self.path.split("/")[3]
        body = ({"model_spec": {"name": name, "signature_name": "", "version": "1"}, "metadata": {}}
                if self.path.endswith("/metadata") else
                {"model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {}}]})
        self.answer(body)

    def do_POST(self):
        self.server.predict_requests += 1
        count = len(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["instances"])
        self.answer({"predictions": [{"probabilities": [1.0, 0.0, 0.0], "class_ids": 0,
                                      "classes": "foreign"}] * count})

    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def foreign_server(port):
    """A server already answering on 127.0.0.1:port (None if the port is taken anyway)."""
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), ForeignHandler)
    except OSError:  # something else already holds it: the port is taken all the same
        yield None
        return
    server.predict_requests = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def run_demo(tiny_export_base, sample_jpegs, tmp_path, *flags):
    images = []
    for i, jpeg in enumerate(sample_jpegs[:3]):
        images.append(tmp_path / f"held_out_{i}.jpg")
        images[-1].write_bytes(jpeg)
    env = dict(os.environ, PATH=str(tmp_path))  # no docker, no tensorflow_model_server
    return run_in_own_session(
        [sys.executable, "-m", "serving.demo", "--model_base_path", str(tiny_export_base), *flags]
        + [str(p) for p in images], cwd=os.path.dirname(os.path.dirname(demo.__file__)), env=env,
        timeout=300)


@pytest.mark.process
def test_demo_refuses_a_typed_port_another_server_holds(tiny_export_base, sample_jpegs, tmp_path):
    port = free_port()
    with foreign_server(port) as foreign:
        result = run_demo(tiny_export_base, sample_jpegs, tmp_path,
                          "--rest_api_port", str(port), "--port", str(free_port()))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: port {port} (--rest_api_port) on 127.0.0.1 is already in use by another server; "
        "stop it, pass another port, or leave --rest_api_port out to let the demo choose a free one"]
    assert foreign.predict_requests == 0 and "foreign" not in result.stdout
    assert "serving.launch" not in result.stdout  # no server was started


def picked_ports(lines):
    """(REST port, gRPC port) from the demo's line naming the free ports it picked."""
    (line,) = [line for line in lines if line.startswith("serving.demo: REST on 127.0.0.1:")]
    assert line.endswith("(free port(s) picked for --rest_api_port, --port)"), line
    rest, grpc = re.findall(r"127\.0\.0\.1:(\d+)", line)
    return int(rest), int(grpc)


def check_demo_classified(result, tmp_path):
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    rest_port, grpc_port = picked_ports(lines)
    assert any(f"REST http://127.0.0.1:{rest_port} " in line for line in lines)  # the stand-in's banner
    classified = [line for line in lines if line.startswith(str(tmp_path))]
    assert len(classified) == 3 and "foreign" not in result.stdout
    assert {line.split(": ", 1)[1].split(" ")[0] for line in classified} <= {"cat", "dog", "fish"}
    assert lines[-1] == "serving.demo: server stopped (exit code 0)"
    return rest_port, grpc_port


@pytest.mark.process
def test_demo_leaves_tf_servings_ports_to_their_server(tiny_export_base, sample_jpegs, tmp_path):
    """8501 answers as a foreign model would and 8500 is held: the demo serves on free ports."""
    with foreign_server(8501) as foreign, foreign_server(8500):
        result = run_demo(tiny_export_base, sample_jpegs, tmp_path)
    assert not {8500, 8501} & set(check_demo_classified(result, tmp_path))
    assert foreign is None or foreign.predict_requests == 0


@pytest.mark.process
def test_two_demos_at_once_do_not_collide(tiny_export_base, sample_jpegs, tmp_path):
    """Two checkouts' `make demo` at the same time: each serves and classifies on its own ports."""
    runs = [tmp_path / "first", tmp_path / "second"]
    for run in runs:
        run.mkdir()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda run: run_demo(tiny_export_base, sample_jpegs, run), runs))
    ports = [check_demo_classified(result, run) for result, run in zip(results, runs)]
    assert len(set(ports[0]) | set(ports[1])) == 4


@pytest.mark.parametrize("status, metadata, message", [
    ({"model_version_status": [{"version": "7", "state": "AVAILABLE"}]}, None,
     "serves version(s) ['7'], not version 1 of --model_base_path"),
    ({"model_version_status": [{"version": "1", "state": "AVAILABLE"}]},
     {"model_spec": {"name": "other_model", "version": "1"}},
     "describes model 'other_model' version 1, not 'image_classifier' version 1"),
])
def test_an_answer_for_another_model_is_not_the_started_server(status, metadata, message):
    with pytest.raises(demo.DemoError, match=re.escape(message)):
        if demo.is_version_available(status, 1, 8501):
            demo.check_metadata(metadata, "image_classifier", 1, 8501)


def test_a_version_still_loading_is_waited_for():
    status = {"model_version_status": [{"version": "1", "state": "LOADING"}]}
    assert demo.is_version_available(status, 1, 8501) is False


@pytest.mark.parametrize("make_base, message", [
    (lambda tmp: tmp / "missing", "is not a directory; pass OUT/export/<model_name>"),
    (lambda tmp: tmp, "holds no N/saved_model.pb; export a model there first"),
])
def test_demo_without_an_export_is_one_error_line(tmp_path, capsys, make_base, message):
    assert demo.main(["--model_base_path", str(make_base(tmp_path)), "a.jpg"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.splitlines()) == 1 and message in out.err
    assert out.err.startswith("error: --model_base_path=")


def test_demo_rejects_one_port_for_both(tiny_export_base, capsys):
    port = str(free_port())
    assert demo.main(["--model_base_path", str(tiny_export_base), "--rest_api_port", port,
                      "--port", port, "a.jpg"]) == 2
    assert capsys.readouterr().err == (
        f"error: --rest_api_port and --port are both {port}; give them different ports\n")


@pytest.mark.process
def test_launcher_refuses_a_port_another_server_holds(tiny_export_base, tmp_path):
    """`python -m serving.launch` on a held gRPC port: one line, exit 2, nothing started."""
    port = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        result = run_in_own_session(
            [sys.executable, "-m", "serving.launch", "--model_base_path", str(tiny_export_base),
             "--rest_api_port", str(free_port()), "--port", str(port)],
            cwd=os.path.dirname(os.path.dirname(launch.__file__)),
            env=dict(os.environ, PATH=str(tmp_path)), timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: gRPC port {port} on 127.0.0.1 is already in use by another "
        "server; stop it or pass --port N"]


def test_launcher_passes_other_flags_to_the_server(tiny_export_base, capsys):
    assert launch.main(["--model_base_path", str(tiny_export_base), "--server", "standin",
                        "--dry_run", "--enable_batching", "--batching_parameters_file", "b.txt"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("--enable_batching --batching_parameters_file b.txt")


@pytest.mark.process
def test_a_server_that_lost_a_picked_port_is_port_lost(tmp_path):
    """The server exited before serving and a port it was given is held now: PortLost."""
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    port = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        with pytest.raises(demo.PortLost):
            demo.check_alive(exited, "before serving", {"rest_api_port": port, "port": free_port()})
    with pytest.raises(demo.DemoError, match="exited with code 0 before serving") as raised:
        demo.check_alive(exited, "before serving", {"rest_api_port": port, "port": free_port()})
    assert not isinstance(raised.value, demo.PortLost)


def test_picked_ports_lost_to_a_race_are_picked_again(monkeypatch, capsys):
    attempts = []

    def serve(args, model_name, version, ports):
        attempts.append(ports)
        if len(attempts) == 1:
            raise demo.PortLost("a port was taken")
        return 0

    monkeypatch.setattr(demo, "serve_and_classify", serve)
    args = demo.build_parser().parse_args(["--model_base_path", "m", "a.jpg"])
    assert demo.serve_on_free_ports(args, "m", 1) == 0
    assert len(attempts) == 2 and attempts[0] != attempts[1]
    assert "serving.demo: a port was taken; picking new ports" in capsys.readouterr().out


@pytest.mark.parametrize("flag, is_typo", [
    ("--dry_rn", True), ("--rest_api_prot=1", True), ("--enable_batchin", True), ("--dry", True),
    # TF Serving's own flags that the stand-in does not take go to TF Serving untouched.
    ("--rest_api_num_threads=4", False), ("--ssl_config_file=f", False),
    ("--enable_profiler", False), ("--saved_model_tags=serve", False)])
def test_launcher_tells_a_typo_from_a_tf_serving_flag(tmp_path, capsys, flag, is_typo):
    argv = ["--model_base_path", str(tmp_path), "--server", "docker", "--dry_run", flag]
    if is_typo:
        with pytest.raises(SystemExit, match="^2$"):
            launch.main(argv)
        assert "did you mean" in capsys.readouterr().err
    else:
        assert launch.main(argv) == 0
        assert capsys.readouterr().out.rstrip().endswith(flag)
