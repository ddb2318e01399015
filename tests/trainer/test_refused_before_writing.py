"""--use_tpu without a TPU to reach, and a warm start from a damaged checkpoint: one line, exit 2,
nothing written (no lock, no params.json), both engines. Each refusal is checked in this process
(the UserError the command prints as its one line), and once through the real command.

    .venv/bin/python -m pytest tests/trainer/test_refused_before_writing.py
    .venv-keras/bin/python -m pytest tests/trainer/test_refused_before_writing.py   # Keras engine only
"""
import time

import pytest

from common.user_errors import UserError
from tests import user_commands
from tests.conftest import free_port, write_dataset
from tests.engines import KERAS, needs_estimator
from tests.trainer.conftest import TINY_FLAGS, as_argv
from trainer.cloud import tpu
from trainer.settings import early_check, table

ENGINES = [pytest.param("estimator", marks=needs_estimator), KERAS]
NO_TPU = ("error: use_tpu: no TPU named and this machine is not a TPU VM (no /dev/accel* or "
          "/dev/vfio/[0-9]*, no $TPU_NAME): pass --tpu NAME (a Cloud TPU, with --tpu_zone and "
          "--gcp_project off Google Cloud), --tpu grpc://IP:8470, or run on the TPU VM; or train on "
          "this machine's CPU/GPU with --no-use_tpu")
NO_LOCAL_TPU = ("error: use_tpu: --tpu local needs this machine's TPU chips (a Cloud TPU VM) and it has "
                "none (/dev/accel* or /dev/vfio/[0-9]*): run on the TPU VM, or pass --tpu NAME of a "
                "Cloud TPU; or train on this machine's CPU/GPU with --no-use_tpu")

pytestmark = pytest.mark.skipif(bool(early_check.local_tpu_devices()), reason="this machine is a TPU VM")


def run_trainer(*argv, without_tensorflow=False):
    """The real command, without the environment that names a TPU (as off a TPU VM);
    without_tensorflow: with a tensorflow that cannot load (a refusal before it loads)."""
    return user_commands.run_trainer(*argv, env=user_commands.user_env(
        drop=early_check.NAME_ENVIRONMENT, without_tensorflow=without_tensorflow))


@pytest.fixture
def off_a_tpu_vm(monkeypatch):
    """This process without the environment that names a TPU."""
    for key in early_check.NAME_ENVIRONMENT:
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("refused") / "data", {"train": 24, "eval": 11}, size=20)


def argv_for(data, out, **overrides):
    return as_argv({**TINY_FLAGS, "train_data_path": f"{data}/train-*",
                    "eval_data_path": f"{data}/eval-*", "output_dir": out, **overrides})


def refusal(argv):
    """The line `python -m trainer.task ARGV` prints for its UserError, run in this process: the
    chain, then the engine (trainer.task.main without its console)."""
    from trainer import chain, task
    with pytest.raises(UserError) as refused:
        params = chain.parse_params(argv)
        task.load_engine(params["engine"])(params)
    assert "\n" not in str(refused.value)
    return f"error: {refused.value}"


def one_line(result):
    assert result.returncode == 2, result.stderr[-3000:]
    lines = user_commands.error_lines(result)
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.process
def test_use_tpu_off_a_tpu_vm_is_one_line_and_exit_code_2_from_the_command(data, tmp_path):
    """The TPU refusals below, as the user's terminal shows them (the Keras engine: both venvs):
    before TensorFlow loads (trainer/settings/early_check.py's tpu_name and check_local_chips),
    here it could not."""
    out = tmp_path / "out"
    argv = argv_for(data, out, engine="keras")
    assert one_line(run_trainer(*argv, "--use_tpu", without_tensorflow=True)) == NO_TPU
    assert one_line(run_trainer(*argv, "--use_tpu", "--tpu", "local", without_tensorflow=True)) == NO_LOCAL_TPU
    assert not out.exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_use_tpu_without_a_tpu_name_off_a_tpu_vm_writes_nothing(data, tmp_path, engine, off_a_tpu_vm):
    out = tmp_path / "out"
    assert refusal(argv_for(data, out, engine=engine) + ["--use_tpu"]) == NO_TPU
    assert not out.exists()


@pytest.mark.trains
@pytest.mark.parametrize("engine", ENGINES)
def test_tpu_local_off_a_tpu_vm_never_reaches_params_json(data, tmp_path, engine, off_a_tpu_vm,
                                                          copy_of_tiny_run):
    """Refused before anything is written, fresh or resumed (the directory it refused stays
    absent, so a run without --use_tpu trains there as in a new one: the session's tiny run),
    and params.json never asks a later run for the TPU that was not there."""
    out = tmp_path / "out"
    assert refusal(argv_for(data, out, engine=engine) + ["--use_tpu", "--tpu", "local"]) == NO_LOCAL_TPU
    assert not out.exists()
    trained_on, run = copy_of_tiny_run(engine)
    params_json = (run / table.PARAMS_FILE).read_bytes()
    files = sorted(p.name for p in run.iterdir())
    resumed = argv_for(trained_on, run, engine=engine, mode="train", train_steps=6)
    assert refusal(resumed + ["--use_tpu", "--tpu", "local"]) == NO_LOCAL_TPU
    assert (run / table.PARAMS_FILE).read_bytes() == params_json
    assert sorted(p.name for p in run.iterdir()) == files
    assert b'"use_tpu": false' in params_json


@pytest.mark.trains
def test_a_tpu_that_is_found_but_does_not_start_leaves_no_params_json(data, tmp_path, monkeypatch):
    """The Keras engine starts its TPU when the driver makes the engine, before params.json:
    chips that are there (faked here) but do not start are one line."""
    monkeypatch.setattr(early_check, "local_tpu_devices", lambda: ["/dev/accel0"])
    out = tmp_path / "out"
    line = refusal(argv_for(data, out, engine="keras") + ["--use_tpu", "--tpu", "local"])
    assert line.startswith("error: use_tpu: the TPU 'local' did not start: "), line
    assert line.endswith("; or train on this machine's CPU/GPU with --no-use_tpu")
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


@pytest.fixture
def damaged_source(tiny_run_of, tmp_path):
    """damaged_source(suffix) -> a copy of the files of the session's finished Keras run (checkpoints
    2 and 4; either engine warm starts from it) with model.ckpt-4<suffix> cut to 40 bytes."""
    def damage(suffix):
        source = tmp_path / "source"
        source.mkdir()
        for path in tiny_run_of("keras")[1].iterdir():
            if path.is_file():
                (source / path.name).write_bytes(path.read_bytes())
        damaged = source / f"model.ckpt-4{suffix}"
        damaged.write_bytes(damaged.read_bytes()[:40])
        return source
    return damage


def damaged_source_line_start_and_end(source):
    return (f"error: checkpoint {source}/model.ckpt-4 (step 4) is damaged: ",
            f"move {source}/model.ckpt-4.* out of the directory to warm start from "
            f"model.ckpt-2 (step 2), or restore the files from a copy")


@pytest.mark.trains
@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_damaged_warm_start_source_is_the_resume_s_one_line_before_the_lock(
        data, damaged_source, tmp_path, engine, suffix):
    source = damaged_source(suffix)
    out = tmp_path / "out"
    line = refusal(argv_for(data, out, engine=engine, warm_start_from=source))
    start, end = damaged_source_line_start_and_end(source)
    assert line.startswith(start) and line.endswith(end), line
    assert not out.exists()


@pytest.mark.process
@pytest.mark.trains
def test_a_damaged_warm_start_source_is_one_line_and_exit_code_2_from_the_command(data, damaged_source, tmp_path):
    source = damaged_source(".index")
    out = tmp_path / "out"
    line = one_line(run_trainer(*argv_for(data, out, engine="keras", warm_start_from=source)))
    start, end = damaged_source_line_start_and_end(source)
    assert line.startswith(start) and line.endswith(end), line
    assert not out.exists()
