"""The Keras environment's two locks: the CPU one make test-keras installs and the TPU one
Dockerfile.keras and TPU VMs install, which must be the same TensorFlow and the same
everything else; and the libtpu check that runs before TensorFlow loads.

    .venv/bin/python -m pytest tests/cloud/test_tpu_lock.py
    .venv-keras/bin/python -m pytest tests/cloud/test_tpu_lock.py
"""
import os
import pathlib
import re
import subprocess

import pytest

from tests.user_commands import NO_TENSORFLOW_DIR, run, run_trainer, user_env
from trainer.cloud import libtpu_pair

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPU_LOCK, TPU_LOCK = ROOT / "requirements-keras.lock", ROOT / libtpu_pair.TPU_LOCK
TPU_ONLY = {"tensorflow-tpu", "libtpu"}


def pins(path):
    """{package: version} of a lock or requirements file (its `name==version` lines)."""
    return dict(re.findall(r"^([A-Za-z0-9][\w.-]*)==([\w.]+)", path.read_text(), re.M))


def test_the_two_locks_agree_on_every_other_package():
    cpu, tpu = pins(CPU_LOCK), pins(TPU_LOCK)
    assert "tensorflow" not in tpu, "tensorflow-tpu is TensorFlow here: the lock must not install both"
    assert tpu["tensorflow-tpu"] == cpu["tensorflow"]
    assert {name: v for name, v in tpu.items() if name not in TPU_ONLY} == \
        {name: v for name, v in cpu.items() if name != "tensorflow"}


def test_the_locked_libtpu_is_the_pair_the_trainer_checks():
    tpu = pins(TPU_LOCK)
    assert libtpu_pair.LIBTPU_FOR_TF_TPU[tpu["tensorflow-tpu"]] == tpu["libtpu"]
    assert pins(ROOT / "requirements-keras-tpu.in")["libtpu"] == tpu["libtpu"]


def test_the_tpu_lock_pins_every_file_by_hash():
    text = TPU_LOCK.read_text()
    for name in pins(TPU_LOCK):
        block = re.search(rf"^{re.escape(name)}==[\w.]+ \\\n((?:    --hash=sha256:[0-9a-f]{{64}}.*\n)+)", text, re.M)
        assert block, f"{name} has no sha256 in {TPU_LOCK.name}"


TPU_VENV_PYTHON = ROOT / ".venv-keras-tpu" / "bin" / "python"
# What pip check finds in a venv of the TPU lock, expected (docs/cloud.md says why): packages
# that require the distribution named tensorflow, which tensorflow-tpu stands in for.
REQUIRING_TENSORFLOW = ("tf-keras", "tensorflow-serving-api")


@pytest.mark.process
@pytest.mark.skipif(not TPU_VENV_PYTHON.exists(), reason=".venv-keras-tpu is not built (make venv-keras-tpu; "
                                                         "CI's make check-tpu-build builds it)")
def test_pip_check_in_the_tpu_venv_finds_only_what_docs_cloud_md_explains():
    done = subprocess.run([str(TPU_VENV_PYTHON), "-m", "pip", "check", "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=120, env=user_env())
    tpu = pins(TPU_LOCK)
    # The checkout's own tpu_image_classifier.egg-info, when a test built the package here: not installed.
    found = sorted(line for line in done.stdout.splitlines() if not line.startswith("tpu-image-classifier "))
    assert found == sorted(f"{name} {tpu[name]} requires tensorflow, which is not installed."
                           for name in REQUIRING_TENSORFLOW), done.stdout + done.stderr
    doc = (ROOT / "docs" / "cloud.md").read_text()
    assert "pip install --no-deps" in doc and all(f"{name} {tpu[name]}" in doc for name in REQUIRING_TENSORFLOW)


def fake_distributions(path, **versions):
    """A directory whose *.dist-info make importlib.metadata report these versions first."""
    for name, version in versions.items():
        info = path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


def trainer_without_data(tmp_path, *python_path, **env):
    """The Keras engine's command on data that is not there, the distributions of python_path
    (directories, first) reported by importlib.metadata."""
    return run_trainer("--engine", "keras", "--train_data_path", tmp_path / "none-*", "--eval_data_path",
                       tmp_path / "none-*", "--output_dir", tmp_path / "out", timeout=120,
                       env=user_env(PYTHONPATH=os.pathsep.join(map(str, python_path)), **env))


@pytest.mark.process
@pytest.mark.parametrize("libtpu, found", [("0.0.52", "libtpu 0.0.52 is installed"),
                                           (None, "libtpu is not installed")])
def test_a_libtpu_the_tpu_build_cannot_run_with_is_one_line_before_tensorflow_loads(tmp_path, libtpu, found):
    tf_version = next(iter(libtpu_pair.LIBTPU_FOR_TF_TPU))
    versions = {"tensorflow-tpu": tf_version} | ({"libtpu": libtpu} if libtpu else {})
    # With a tensorflow that cannot be imported: the answer comes before TensorFlow loads.
    result = trainer_without_data(tmp_path, fake_distributions(tmp_path / "site", **versions), NO_TENSORFLOW_DIR)
    wanted = libtpu_pair.LIBTPU_FOR_TF_TPU[tf_version]
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == (f"error: tensorflow-tpu {tf_version} runs with libtpu {wanted} "
                             f"({libtpu_pair.TPU_LOCK}), but {found}: `import tensorflow` could abort "
                             f"or hang; install the lock (pip install --no-deps --require-hashes -r "
                             f"{libtpu_pair.TPU_LOCK}), or set TPU_LOAD_LIBRARY=0 to run without the TPU\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_the_pinned_pair_or_tpu_load_library_0_passes_the_check(tmp_path):
    tf_version = next(iter(libtpu_pair.LIBTPU_FOR_TF_TPU))
    site = fake_distributions(tmp_path / "site", **{"tensorflow-tpu": tf_version, "libtpu": "0.0.52"})
    result = trainer_without_data(tmp_path, site, TPU_LOAD_LIBRARY=0)
    # Past the check: the next line is about the data, which is not there.
    assert result.returncode == 2 and "libtpu" not in result.stderr and "none-*" in result.stderr
    pinned = fake_distributions(tmp_path / "pinned", **{"tensorflow-tpu": tf_version,
                                                        "libtpu": libtpu_pair.LIBTPU_FOR_TF_TPU[tf_version]})
    check = run("trainer.cloud.libtpu_pair", timeout=60, env=user_env(PYTHONPATH=pinned))
    assert check.returncode == 0 and check.stdout.startswith(f"tensorflow-tpu {tf_version} with libtpu ")
