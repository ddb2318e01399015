"""`python -m serving.standin.server` with a port another server holds: one line, exit code 2,
before TensorFlow loads (the port is probed before any model loads).

gRPC sets SO_REUSEPORT by default, so without the stand-in's check a second server would
bind the same gRPC port and silently take half of the connections.

    .venv/bin/python -m pytest tests/serving/standin/test_server_ports.py
"""
import socket

import pytest

from tests import user_commands

pytestmark = [pytest.mark.process]


@pytest.fixture
def held_port():
    """A loopback port held by a listening socket with SO_REUSEPORT, as a gRPC server holds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("side, flag, other_flag", [("REST", "--rest_api_port", "--port"),
                                                     ("gRPC", "--port", "--rest_api_port")])
def test_a_port_in_use_is_one_line_and_exit_code_2(tmp_path, held_port, side, flag, other_flag):
    result = user_commands.run(  # a `tensorflow` that cannot load: refused before it would
        "serving.standin.server", "--model_base_path", tmp_path, f"{flag}={held_port}",
        f"{other_flag}=0", env=user_commands.user_env(without_tensorflow=True), timeout=60)
    expected = (f"error: {side} port {held_port} on 127.0.0.1 is "
                f"already in use; stop the other server or pass {flag} N")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == expected
    assert [line for line in result.stderr.splitlines() if "error" in line.lower()] == [expected]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # never announced itself as serving
