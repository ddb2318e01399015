"""tools/install_venv.sh never harms a working venv: a failed install leaves it as it was.

The script builds into a temporary sibling directory and renames it into place only after
the install succeeded; a venv whose recorded lock (VENV/.installed) equals the lock byte for
byte is left alone. Runs the real script with pip, offline (PIP_NO_INDEX), against a fake
venv and tiny locks: a lock naming a package that does not exist, an empty one.

    .venv/bin/python -m pytest tests/common/test_install_venv.py
"""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.process]

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "tools" / "install_venv.sh"
BROKEN_LOCK = "no-such-package-tpu-image-classifier==1.0 --hash=sha256:" + "0" * 64 + "\n"
OLD_LOCK = "# the lock the working venv was built from\n"


def install(venv, lock, **env):
    """Runs install_venv.sh with pip and no package index; returns the CompletedProcess."""
    python = shutil.which("python3.11") or sys.executable
    env = dict(os.environ, **dict(dict(VENV=str(venv), LOCK=str(lock), INSTALLER="pip",
                                       PYTHON=python, PIP_NO_INDEX="1"), **env))
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def working_venv(tmp_path):
    """A venv the script did not create in this run: its files, and the lock it records."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / "marker").write_text("a working venv")
    (venv / ".installed").write_text(OLD_LOCK)
    return venv


def snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def leftovers(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if ".building." in p.name or ".old." in p.name)


def test_a_failed_install_leaves_the_working_venv_as_it_was(working_venv, tmp_path):
    lock = tmp_path / "broken.lock"
    lock.write_text(BROKEN_LOCK)
    before = snapshot(working_venv)
    result = install(working_venv, lock)
    assert result.returncode != 0
    assert "no-such-package-tpu-image-classifier" in result.stderr
    assert snapshot(working_venv) == before
    assert leftovers(tmp_path) == []  # the temporary build is gone, and only it


def test_a_venv_built_from_the_same_lock_is_left_alone(working_venv, tmp_path):
    lock = tmp_path / "same.lock"
    lock.write_text(OLD_LOCK)
    before = snapshot(working_venv)
    result = install(working_venv, lock, PYTHON="/nonexistent/python")  # would fail if it built
    assert result.returncode == 0, result.stderr
    assert "already built" in result.stderr
    assert snapshot(working_venv) == before


def test_a_successful_install_replaces_the_venv_whole(working_venv, tmp_path):
    lock = tmp_path / "new.lock"
    lock.write_text("# no packages\n")
    result = install(working_venv, lock, VENV_ENV="TF_USE_LEGACY_KERAS=1")
    assert result.returncode == 0, result.stderr
    assert not (working_venv / "marker").exists()
    assert (working_venv / ".installed").read_text() == "# no packages\n"
    assert leftovers(tmp_path) == []
    # Its scripts name the final directory, and every Python of it starts with VENV_ENV set.
    assert (working_venv / "bin" / "pip").read_text().startswith(f"#!{working_venv}/bin/python")
    probe = subprocess.run([str(working_venv / "bin" / "python"), "-c",
                            "import os, trainer; print(os.environ['TF_USE_LEGACY_KERAS'])"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"})
    assert probe.stdout.strip() == "1", probe.stderr


def lock_of(package):
    """package's entry of requirements.lock (name==version and its hashes), as a lock of its own."""
    lines = (SCRIPT.parents[1] / "requirements.lock").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{package}=="))
    entry = [lines[start]]
    while entry[-1].endswith("\\"):
        entry.append(lines[start + len(entry)])
    return "\n".join(entry) + "\n"


@pytest.mark.parametrize("compile_bytecode, compiled", [("yes", True), ("no", False)])
def test_bytecode_is_compiled_at_install_unless_told_not_to(tmp_path, compile_bytecode, compiled):
    """CI builds its venvs with COMPILE_BYTECODE=no (.ci/run); make's commands then write what
    they import (the Makefile unexports PYTHONDONTWRITEBYTECODE). uv from its cache, offline:
    make venv filled it before any test runs."""
    uv = shutil.which("uv") or SCRIPT.parents[1] / ".venv-uv" / "bin" / "uv"
    if not os.path.exists(uv):
        pytest.skip("no uv here (pip built the venvs): the flag is uv's --compile-bytecode")
    lock = tmp_path / "six.lock"
    lock.write_text(lock_of("six"))
    result = install(tmp_path / "venv", lock, INSTALLER="uv", UV_OFFLINE="1", COMPILE_BYTECODE=compile_bytecode,
                     PATH=f"{os.path.dirname(uv)}{os.pathsep}{os.environ['PATH']}")
    assert result.returncode == 0, result.stderr
    assert bool(list((tmp_path / "venv").rglob("six*.pyc"))) == compiled
