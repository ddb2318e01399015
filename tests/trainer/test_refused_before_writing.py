"""--use_tpu without a TPU to reach, and a warm start from a damaged checkpoint: one line, exit 2,
nothing written (no lock, no params.json), both engines, through the real command.

    .venv/bin/python -m pytest tests/trainer/test_refused_before_writing.py
    .venv-keras/bin/python -m pytest tests/trainer/test_refused_before_writing.py   # Keras engine only
"""
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import free_port, write_dataset
from tests.engines import needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.cloud import tpu
from trainer.settings import table

ENGINES = [pytest.param("estimator", marks=needs_estimator), "keras"]
NO_TPU = ("error: use_tpu: no TPU named and this machine is not a TPU VM (no /dev/accel* or "
          "/dev/vfio/[0-9]*, no $TPU_NAME): pass --tpu NAME (a Cloud TPU, with --tpu_zone and "
          "--gcp_project off Google Cloud), --tpu grpc://IP:8470, or run on the TPU VM; or train on "
          "this machine's CPU/GPU with --no-use_tpu")
NO_LOCAL_TPU = ("error: use_tpu: --tpu local needs this machine's TPU chips (a Cloud TPU VM) and it has "
                "none (/dev/accel* or /dev/vfio/[0-9]*): run on the TPU VM, or pass --tpu NAME of a "
                "Cloud TPU; or train on this machine's CPU/GPU with --no-use_tpu")

pytestmark = pytest.mark.skipif(bool(tpu.local_tpu_devices()), reason="this machine is a TPU VM")


def run_trainer(*argv):
    """The real command, without the environment that names a TPU (as off a TPU VM)."""
    dropped = ("TF_CPP_MIN_LOG_LEVEL", "PYTHONWARNINGS") + tpu.NAME_ENVIRONMENT
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run([sys.executable, "-m", "trainer.task", *map(str, argv)],
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("refused") / "data", {"train": 24, "eval": 11}, size=20)


def argv_for(data, out, **overrides):
    return as_argv({**TINY_FLAGS, "train_data_path": f"{data}/train-*",
                    "eval_data_path": f"{data}/eval-*", "output_dir": out, **overrides})


def one_line(result):
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_use_tpu_without_a_tpu_name_off_a_tpu_vm_writes_nothing(data, tmp_path, engine):
    out = tmp_path / "out"
    assert one_line(run_trainer(*argv_for(data, out, engine=engine), "--use_tpu")) == NO_TPU
    assert not out.exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_tpu_local_off_a_tpu_vm_never_reaches_params_json(data, tmp_path, engine):
    """Refused before anything is written, fresh or resumed; the run without --use_tpu then works,
    and params.json never asks a later run for the TPU that was not there."""
    out = tmp_path / "out"
    argv = argv_for(data, out, engine=engine, mode="train", train_steps=2)  # quick: train only
    assert one_line(run_trainer(*argv, "--use_tpu", "--tpu", "local")) == NO_LOCAL_TPU
    assert not out.exists()
    trained = run_trainer(*argv)
    assert trained.returncode == 0, trained.stderr[-3000:]
    params_json = (out / table.PARAMS_FILE).read_bytes()
    files = sorted(p.name for p in out.iterdir())
    resumed = run_trainer(*argv_for(data, out, engine=engine, mode="train", train_steps=4),
                          "--use_tpu", "--tpu", "local")
    assert one_line(resumed) == NO_LOCAL_TPU
    assert (out / table.PARAMS_FILE).read_bytes() == params_json
    assert sorted(p.name for p in out.iterdir()) == files
    assert b'"use_tpu": false' in params_json


def test_a_tpu_that_is_found_but_does_not_start_leaves_no_params_json(data, tmp_path, monkeypatch, capsys):
    """The Keras engine starts its TPU when the driver makes the engine, before params.json:
    chips that are there (faked here) but do not start are one line."""
    from trainer import task
    monkeypatch.setattr(tpu, "local_tpu_devices", lambda: ["/dev/accel0"])
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        task.main(list(map(str, argv_for(data, out, engine="keras"))) + ["--use_tpu", "--tpu", "local"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: use_tpu: the TPU 'local' did not start: "), lines[-5:]
    assert lines[-1].endswith("; or train on this machine's CPU/GPU with --no-use_tpu")
    assert not (out / table.PARAMS_FILE).exists()


@pytest.mark.parametrize("address, message", [
    ("grpc://127.0.0.1:{port}", "use_tpu: nothing answers at --tpu grpc://127.0.0.1:{port} ("),
    ("my-tpu", "use_tpu: --tpu 'my-tpu' is a Cloud TPU name, and off Google Cloud its zone and "
               "project cannot be detected (metadata server: "),
])
def test_an_unreachable_tpu_is_one_line_in_seconds(monkeypatch, address, message):
    """Offline-safe: a closed port and an absent metadata server answer at once, and the probes
    have a timeout (TensorFlow's metadata lookup has none)."""
    port = free_port()
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{free_port()}")
    params = dict(table.DEFAULTS, use_tpu=True, tpu=address.format(port=port))
    start = time.monotonic()
    with pytest.raises(tpu.TpuNotFound) as error:
        tpu.check_tpu(params)
    assert time.monotonic() - start < tpu.PROBE_TIMEOUT_SECS + 2
    assert str(error.value).startswith(message.format(port=port))
    assert str(error.value).endswith("; or train on this machine's CPU/GPU with --no-use_tpu")


@pytest.fixture(scope="module")
def source_run(data, tmp_path_factory):
    """A finished 4-step Keras run (checkpoints 2 and 4): either engine warm starts from it."""
    out = tmp_path_factory.mktemp("source") / "run"
    result = run_trainer(*argv_for(data, out, engine="keras"))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_warm_start_source_is_the_resume_s_one_line_before_the_lock(
        data, source_run, tmp_path, engine, suffix):
    source = tmp_path / "source"
    source.mkdir()
    for path in source_run.iterdir():
        if path.is_file():
            (source / path.name).write_bytes(path.read_bytes())
    damaged = source / f"model.ckpt-4{suffix}"
    damaged.write_bytes(damaged.read_bytes()[:40])
    out = tmp_path / "out"
    line = one_line(run_trainer(*argv_for(data, out, engine=engine, warm_start_from=source)))
    assert line.startswith(f"error: checkpoint {source}/model.ckpt-4 (step 4) is damaged: ")
    assert line.endswith(f"move {source}/model.ckpt-4.* out of the directory to warm start from "
                         f"model.ckpt-2 (step 2), or restore the files from a copy")
    assert not out.exists()
