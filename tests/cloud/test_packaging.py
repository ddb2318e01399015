"""The trainer package built from setup.py holds everything the cloud job imports.

Builds the sdist as the README tells users to (python -m build), installs it with
no dependencies into an empty target directory, and imports every module of the
four packages from there with the checkout itself off sys.path.

    .venv/bin/python -m pytest tests/cloud/test_packaging.py
"""
import os
import re
import pathlib
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import building_from_checkout

pytestmark = [pytest.mark.process]

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("common", "trainer", "preprocess", "serving")

# Imports every module of PACKAGES from sys.argv[1] (the install target) only.
IMPORT_ALL = """
import importlib, importlib.util, pkgutil, sys
target, root = sys.argv[1], sys.argv[2]
sys.path[:] = [target] + [p for p in sys.path if p not in ("", ".", root)]
names = []
for package in {packages!r}:
    module = importlib.import_module(package)
    if not module.__file__.startswith(target):
        raise SystemExit(f"{{package}} imported from {{module.__file__}}, not the install")
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.startswith({needs_jax!r}) and importlib.util.find_spec("jax") is None:
            continue  # the JAX engine's modules import jax: .venv-jax's, not the job's runtime
        importlib.import_module(info.name)
        names.append(info.name)
print("\\n".join(names))
""".format(packages=PACKAGES, needs_jax="trainer.jax.")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    with building_from_checkout():
        subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                        str(out), str(ROOT)], check=True, capture_output=True, cwd=ROOT)
    (archive,) = out.glob("*.tar.gz")
    return archive


def source_modules(package):
    return {str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py")}


def test_sdist_contains_every_module_of_the_checkout(sdist):
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for package in PACKAGES:
        missing = source_modules(package) - names
        assert not missing, f"modules missing from {sdist.name}: {sorted(missing)}"


def test_installed_sdist_imports_everything_the_job_needs(sdist, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(sdist)], check=True, capture_output=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(target), str(ROOT)],
                            capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = set(result.stdout.split())
    assert {"trainer.task", "common.record_schema", "preprocess.jpeg_to_tfrecord"} <= imported


def test_every_sdist_named_is_the_one_this_build_makes(sdist):
    """Job configs and docs that name the package archive name this build's file.

    (The Vertex jobs now run the Dockerfile's image, which installs the checkout itself;
    the sdist is what Dataflow workers and `gcloud ai-platform` build and install.)
    """
    pages = sorted((ROOT / "cloud").glob("*.yaml")) + [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    named = {path.name: set(re.findall(r"tpu[_-]image[_-]classifier-[\w.]+?\.tar\.gz", path.read_text()))
             for path in pages}
    referencing = {name: files for name, files in named.items() if files}
    assert referencing, "nothing names the sdist"
    for name, files in referencing.items():
        assert files == {sdist.name}, f"{name} names {sorted(files)}, the build makes {sdist.name}"
