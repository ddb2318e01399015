"""TF_CONFIG roles (trainer/cloud/tf_config.py, trainer/estimator/cluster.py) and the --use_tpu --tpu local path.

The whole cluster runs under gcloud in test_gcloud_local_train.py; here each
piece runs alone, the done-token handshake with real in-process servers.

    .venv/bin/python -m pytest tests/cloud/test_cluster_roles.py
"""
import json
import threading

import pytest
import tensorflow as tf

from trainer.cloud import tf_config
from trainer.estimator import cluster, engine as estimator_engine
from trainer import chain
from tests.conftest import free_ports


def make_tf_config(task_type, index=0, workers=1, chief="chief", ports=None):
    ports = ports or list(range(2222, 2224 + workers))
    spec = {chief: [f"localhost:{ports[0]}"], "ps": [f"localhost:{ports[1]}"],
            "worker": [f"localhost:{port}" for port in ports[2:2 + workers]]}
    return {"cluster": spec, "task": {"type": task_type, "index": index}, "environment": "cloud"}


def test_read_tf_config_unset_and_bad_json():
    assert tf_config.read_tf_config({}) == {}
    assert tf_config.read_tf_config({"TF_CONFIG": ""}) == {}
    with pytest.raises(tf_config.ClusterError, match=r"TF_CONFIG='\{chief' is not JSON"):
        tf_config.read_tf_config({"TF_CONFIG": "{chief"})


@pytest.mark.parametrize("task_type, index, expected", [
    ("chief", 0, ["/job:ps", "/job:chief"]),
    ("master", 0, ["/job:ps", "/job:master"]),
    ("worker", 1, ["/job:ps", "/job:worker/task:1"]),
    ("ps", 0, None),
    ("evaluator", 0, None),
])
def test_session_config_filters_devices_of_trainers_only(task_type, index, expected):
    config = make_tf_config(task_type, index, workers=2, chief="master" if task_type == "master" else "chief")
    session_config = tf_config.make_session_config(config)
    assert (None if session_config is None else list(session_config.device_filters)) == expected
    if session_config is not None:
        assert session_config.allow_soft_placement


@pytest.mark.parametrize("config", [
    {},  # a local run
    {"cluster": {}, "task": {}, "environment": "cloud"},  # gcloud local train without --distributed
    {"cluster": {"chief": ["localhost:2222"]}, "task": {"type": "chief", "index": 0}},  # one node
])
def test_without_a_ps_nothing_changes(config):
    assert not tf_config.is_ps_cluster(config)
    assert tf_config.make_session_config(config) is None


def test_run_config_of_a_worker_has_its_filters(tiny_params, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(make_tf_config("worker")))
    run_config = estimator_engine.make_run_config(tiny_params)
    assert run_config.task_type == "worker" and run_config.num_ps_replicas == 1
    assert list(run_config.session_config.device_filters) == ["/job:ps", "/job:worker/task:0"]


def test_no_ps_runs_the_plain_loop(monkeypatch):
    calls = []
    monkeypatch.setattr(estimator_engine, "run", lambda params: calls.append(params) or "export-path")
    environ = {"TF_CONFIG": json.dumps({"cluster": {}, "task": {}, "environment": "cloud"})}
    assert cluster.run({"use_tpu": False}, environ) == "export-path" and len(calls) == 1


@pytest.mark.parametrize("task_type, params, error", [
    ("worker", {"use_tpu": True}, r"use_tpu=True with a parameter-server cluster .*task worker/0"),
    ("tpu_worker", {"use_tpu": False}, r"task type 'tpu_worker' is not one of"),
])
def test_roles_it_cannot_run_are_named(task_type, params, error):
    environ = {"TF_CONFIG": json.dumps(make_tf_config(task_type))}
    with pytest.raises(tf_config.ClusterError, match=error):
        cluster.run(params, environ)


def test_evaluator_does_nothing(monkeypatch, caplog):
    monkeypatch.setattr(estimator_engine, "run", lambda params: pytest.fail("an evaluator must not run the loop"))
    environ = {"TF_CONFIG": json.dumps(make_tf_config("evaluator"))}
    with caplog.at_level("WARNING"):
        assert cluster.run({"use_tpu": False}, environ) is None
    assert "the chief evaluates and exports" in caplog.text


def test_a_task_whose_port_is_held_says_so_in_one_line():
    """Its server cannot start (another process listens there): one line, not gRPC's error and a
    traceback while the other tasks wait for it."""
    import socket
    held = socket.socket()
    held.bind(("", 0))
    held.listen()
    ports = free_ports(2) + [held.getsockname()[1]]
    try:
        with pytest.raises(tf_config.ClusterError, match=rf"^worker/0 cannot listen on localhost:{ports[2]} "
                                                         r"\(TF_CONFIG's cluster\): another process holds"):
            cluster.start_server(make_tf_config("worker", ports=ports))
    finally:
        held.close()


def test_ps_serves_until_the_chief_and_every_worker_are_done():
    ports = free_ports(4)
    configs = {name: make_tf_config(name.split("/")[0], int(name.split("/")[1]), workers=2, ports=ports)
               for name in ("ps/0", "chief/0", "worker/0", "worker/1")}
    servers = {name: cluster.start_server(config) for name, config in configs.items()}
    ps = threading.Thread(target=cluster.serve_until_done, args=(servers["ps/0"], configs["ps/0"]),
                          daemon=True)
    ps.start()
    for name in ("chief/0", "worker/0"):
        cluster.signal_done(servers[name], configs[name])
    ps.join(timeout=2)
    assert ps.is_alive(), "the ps stopped before worker/1 was done"
    cluster.signal_done(servers["worker/1"], configs["worker/1"])
    ps.join(timeout=30)
    assert not ps.is_alive()


@pytest.mark.parametrize("argv, expected", [
    (["--use_tpu", "--tpu", "local"], {"tpu": "local", "zone": None, "project": None}),
    (["--no-use_tpu", "--tpu", "local"], None),  # no resolver, so no TPU is looked for
])
def test_tpu_vm_local_resolver_only_with_use_tpu(tiny_argv, monkeypatch, argv, expected):
    calls = []

    def record_resolver(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("no TPU here")
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", record_resolver)
    params = chain.parse_params(tiny_argv + argv)
    assert params["tpu"] == "local"
    if expected is None:
        estimator_engine.make_estimator(params)
        assert calls == []
    else:
        with pytest.raises(RuntimeError, match="no TPU here"):
            estimator_engine.make_estimator(params)
        assert calls == [expected]


class FakeTpuVmResolver:
    """TPUClusterResolver(tpu="local") on a TPU VM: the chips are this host's, no Cloud TPU API call."""
    made = []

    def __init__(self, tpu=None, zone=None, project=None):
        self.made.append({"tpu": tpu, "zone": zone, "project": project})

    def master(self, *args, **kwargs):
        return ""  # a local TPU: the session runs in this process

    def cluster_spec(self):
        return tf.train.ClusterSpec({})


def test_tpu_vm_local_resolver_reaches_the_run_config(tiny_argv, monkeypatch):
    """The route of a TPU VM and of a Vertex AI TPU job (cloud/vertex_tpu_job.yaml: --tpu=local)."""
    FakeTpuVmResolver.made = []
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", FakeTpuVmResolver)
    params = chain.parse_params(tiny_argv + ["--use_tpu", "--tpu", "local", "--iterations_per_loop", "3"])
    run_config = estimator_engine.make_run_config(params)
    assert FakeTpuVmResolver.made == [{"tpu": "local", "zone": None, "project": None}]
    assert isinstance(run_config.cluster, FakeTpuVmResolver) and run_config.master == ""
    assert (run_config.tpu_config.iterations_per_loop, run_config.tpu_config.num_shards) == (
        3, params["num_cores"])
    assert not run_config.session_config.HasField("cluster_def")  # nothing remote to reach
