"""The trainer's containers (Dockerfile, Dockerfile.keras, Dockerfile.jax), checked without a Docker engine.

No Docker engine runs on the machines this was built on, so each image is checked by
what can be read and run here:
- its install step is the lock install CI makes (tools/install_venv.sh), on the lock's Python;
- the TPU runtime sits in its own pinned lines, matching the lock's TensorFlow, and
  cloud/fetch_pinned.py (which guards the downloads) keeps only files with the pinned sha256;
- its entry point is a module of this checkout that answers --help; the JAX image's, run in
  .venv-jax (its lock less libtpu) with the image's ENV, also takes --engine jax;
- its image has ONE name across the job configs, README.md, docs/cloud.md and the
  Dockerfile's own build command; a job with --engine keras or jax names that engine's image;
- the job files' arguments are trainer flags, and a JAX job's pass the JAX engine's checks.

    .venv/bin/python -m pytest tests/cloud/test_container_image.py
"""
import hashlib
import importlib.util
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.user_commands import run_trainer, user_env
from trainer.settings import checks, flags, table

ROOT = pathlib.Path(__file__).resolve().parents[2]
REGISTRY = "us-central1-docker.pkg.dev/YOUR_PROJECT/tpu-image-classifier"
IMAGES = {"Dockerfile": f"{REGISTRY}/trainer:tf2.15", "Dockerfile.keras": f"{REGISTRY}/trainer-keras:tf2.20",
          "Dockerfile.jax": f"{REGISTRY}/trainer-jax:jax0.10.2"}
LOCKS = {"Dockerfile": "requirements.lock", "Dockerfile.keras": "requirements-keras-tpu.lock",
         "Dockerfile.jax": "requirements-jax-tpu.lock"}
# What each image's tag names: the framework its lock installs (the Keras image's TensorFlow is
# the TPU build) as (distribution, tag prefix, version parts): TensorFlow by major.minor, JAX,
# whose minor releases differ more, by its whole version.
TAG_OF = {"requirements.lock": ("tensorflow", "tf", 2), "requirements-keras-tpu.lock": ("tensorflow-tpu", "tf", 2),
          "requirements-jax-tpu.lock": ("jax", "jax", 3)}
# The images whose every file is their lock's, by hash (the TF 2.15 one adds Google's TPU build).
HASHED_ONLY = ("Dockerfile.keras", "Dockerfile.jax")
# The engine each job's --engine names -> its image (no --engine: the Estimator engine).
IMAGE_OF_ENGINE = {None: "Dockerfile", "keras": "Dockerfile.keras", "jax": "Dockerfile.jax"}
# Where the JAX image's entry point can run here: its lock less libtpu (tests/cloud/test_jax_tpu_lock.py).
VENV_JAX_PYTHON = ROOT / ".venv-jax/bin/python"
# Google's table of TensorFlow version -> libtpu.so version (https://cloud.google.com/tpu/docs/runtimes,
# read 2026-11-24), for the TensorFlow the Dockerfile's lock pins.
LIBTPU_FOR_TF = {"2.15.0": "1.9.0", "2.15.1": "1.9.0"}
# pip options that change neither what is installed nor how it is resolved.
COSMETIC_PIP_OPTIONS = {"-q", "--quiet", "--no-cache-dir", "--disable-pip-version-check"}
# A container image name: Artifact Registry (REGION-docker.pkg.dev/...) or Container Registry.
IMAGE_NAME = re.compile(r"[\w.-]*(?:docker\.pkg\.dev|gcr\.io)/[\w./-]+(?::[\w.-]+)?")
PACKAGES = ("common", "trainer", "preprocess", "serving")


def instructions(text):
    """[(INSTRUCTION, arguments)] of a Dockerfile: continuation lines joined, comments dropped."""
    out, logical = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        if logical.strip():
            keyword, _, rest = logical.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
        logical = ""
    return out


def build_args(text):
    return dict(rest.split("=", 1) for keyword, rest in instructions(text) if keyword == "ARG")


def pip_install_options(command, lock):
    """The options of the `pip install ... -r LOCK` in command, without the cosmetic ones."""
    words = shlex.split(command)
    start = next(i for i, word in enumerate(words) if word.endswith("pip") and words[i + 1] == "install")
    end = words.index(lock) + 1
    return set(words[start + 2:end]) - COSMETIC_PIP_OPTIONS


def ci_lock_install():
    """The pip line of tools/install_venv.sh, the install CI runs (make test -> make venv)."""
    script = (ROOT / "tools/install_venv.sh").read_text().replace("\\\n", " ")
    script = script.replace('"$LOCK"', "requirements.lock")  # LOCK's default, make test's lock
    (line,) = [line for line in script.splitlines() if "pip\" install" in line and "requirements.lock" in line]
    return pip_install_options(line.replace('"$build/bin/pip"', "pip"), "requirements.lock")


def lock_pin(lock, package):
    match = re.search(rf"^{re.escape(package)}==([\w.]+)", (ROOT / lock).read_text(), re.M)
    return match and match.group(1)


def lock_python(lock):
    return re.search(r"--python-version (\d+\.\d+)", (ROOT / lock).read_text()).group(1)


@pytest.mark.parametrize("dockerfile", sorted(LOCKS))
def test_install_step_is_the_lock_install_ci_makes(dockerfile):
    steps = instructions((ROOT / dockerfile).read_text())
    lock = LOCKS[dockerfile]
    (base,) = [rest for keyword, rest in steps if keyword == "FROM"]
    installs = [rest for keyword, rest in steps if keyword == "RUN" and f"-r {lock}" in rest]
    assert len(installs) == 1, f"{dockerfile} must install {lock} in one step"
    assert pip_install_options(installs[0], lock) == ci_lock_install() - {"requirements.lock"} | {lock}
    assert ("COPY", f"{lock} ./") in steps
    if (ROOT / lock).exists():  # requirements-keras.lock comes with the Keras engine
        assert base.startswith(f"python:{lock_python(lock)}-"), f"{base}: the lock is for Python {lock_python(lock)}"


def test_ci_installs_the_lock_with_hashes_and_no_resolution():
    assert ci_lock_install() == {"--no-deps", "--require-hashes", "-r", "requirements.lock"}


def test_tpu_runtime_of_the_tf215_image_matches_the_lock():
    text = (ROOT / "Dockerfile").read_text()
    args, tf_version = build_args(text), lock_pin("requirements.lock", "tensorflow")
    (base,) = [rest for keyword, rest in instructions(text) if keyword == "FROM"]
    cp = "cp" + base.split(":")[1].split("-")[0].replace(".", "")  # python:3.11-slim -> cp311
    wheel = args["TF_TPU_WHEEL_URL"].rsplit("/", 1)[1]
    assert wheel.startswith(f"tensorflow-{tf_version}-{cp}-{cp}-manylinux"), wheel
    assert args["TF_TPU_WHEEL_URL"].startswith(
        f"https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-{tf_version}/")
    assert args["LIBTPU_URL"] == ("https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/"
                                  f"{LIBTPU_FOR_TF[tf_version]}/libtpu.so")
    fetch_pinned = load_fetch_pinned()
    for name in ("TF_TPU_WHEEL_SHA256", "LIBTPU_SHA256"):  # a real hash or the placeholder it refuses
        assert args[name] == fetch_pinned.PLACEHOLDER or re.fullmatch(r"[0-9a-f]{64}", args[name])
    runs = " ".join(rest for keyword, rest in instructions(text) if keyword == "RUN")
    assert 'fetch_pinned.py "$TF_TPU_WHEEL_URL" "$TF_TPU_WHEEL_SHA256"' in runs
    assert 'fetch_pinned.py "$LIBTPU_URL" "$LIBTPU_SHA256" /lib/libtpu.so' in runs


@pytest.mark.parametrize("dockerfile", HASHED_ONLY)
def test_the_image_is_its_lock_and_nothing_filled_in_by_hand(dockerfile):
    """Every file of the Keras and JAX images comes from its TPU lock, by hash: no build
    argument, no download, no placeholder (tests/cloud/test_tpu_lock.py and
    test_jax_tpu_lock.py check those locks)."""
    text = (ROOT / dockerfile).read_text()
    steps = instructions(text)
    assert not [rest for keyword, rest in steps if keyword == "ARG"]
    assert "FILL_IN" not in text and "http" not in " ".join(rest for _, rest in steps)
    pip_installs = [rest for keyword, rest in steps if keyword == "RUN" and "pip install" in rest]
    assert [p for p in pip_installs if "-r " in p] == [p for p in pip_installs if LOCKS[dockerfile] in p]


@pytest.mark.parametrize("dockerfile", sorted(LOCKS))
def test_image_tag_names_the_framework_of_its_lock(dockerfile):
    lock = LOCKS[dockerfile]
    distribution, prefix, parts = TAG_OF[lock]
    version = ".".join(lock_pin(lock, distribution).split(".")[:parts])
    assert IMAGES[dockerfile].endswith(f":{prefix}{version}"), (IMAGES[dockerfile], lock)


def image_env(dockerfile):
    """{NAME: value} of a Dockerfile's ENV lines (NAME=value pairs)."""
    return dict(pair.split("=", 1) for keyword, rest in instructions((ROOT / dockerfile).read_text())
                if keyword == "ENV" for pair in shlex.split(rest))


def test_the_jax_image_runs_keras_on_jax_with_tf_keras_for_the_export():
    env = image_env("Dockerfile.jax")
    assert env["KERAS_BACKEND"] == "jax" and env["TF_USE_LEGACY_KERAS"] == "1"
    assert lock_pin(LOCKS["Dockerfile.jax"], "libtpu")  # JAX's TPU runtime, loaded from its package


@pytest.fixture(scope="module")
def trainer_help():
    result = run_trainer("--help", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.process
@pytest.mark.parametrize("dockerfile", sorted(LOCKS))
def test_entry_point_is_the_trainer_and_answers_help(dockerfile, trainer_help):
    steps = instructions((ROOT / dockerfile).read_text())
    (entrypoint,) = [json.loads(rest) for keyword, rest in steps if keyword == "ENTRYPOINT"]
    assert entrypoint[:2] == ["python", "-m"]
    module = entrypoint[2]
    spec = importlib.util.find_spec(module)
    assert spec and spec.origin.startswith(str(ROOT)), f"{module} is not a module of this checkout"
    assert trainer_help.startswith("usage: python -m trainer.task") and "--use_tpu" in trainer_help
    for package in PACKAGES:
        assert ("COPY", f"{package} ./{package}") in steps


@pytest.mark.process
def test_the_jax_image_entry_point_takes_the_jax_engine(tmp_path):
    """The JAX image's entry point, run with the image's ENV in .venv-jax (its lock less libtpu),
    answers --help and runs the JAX engine's own checks: a --tpu copied from a Keras job is
    refused in one line naming the engine, before anything is written."""
    if not VENV_JAX_PYTHON.exists():
        pytest.skip(".venv-jax is not built here (make venv-jax)")
    steps = instructions((ROOT / "Dockerfile.jax").read_text())
    (entrypoint,) = [json.loads(rest) for keyword, rest in steps if keyword == "ENTRYPOINT"]
    env = user_env(drop=("KERAS_BACKEND", "TF_USE_LEGACY_KERAS"), **image_env("Dockerfile.jax"))

    def run_entry_point(*argv):
        return subprocess.run([str(VENV_JAX_PYTHON), *entrypoint[1:], *argv], capture_output=True,
                              text=True, timeout=120, cwd=ROOT, env=env)

    helped = run_entry_point("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m trainer.task")
    assert "--engine" in helped.stdout and "--use_tpu" in helped.stdout
    out = tmp_path / "out"
    refused = run_entry_point("--engine", "jax", "--use_tpu", "--tpu", "local", "--output_dir", out)
    assert refused.returncode == 2 and not out.exists()
    assert refused.stderr.count("\n") == 1 and "means nothing to engine='jax'" in refused.stderr, refused.stderr


def named_images(path):
    return set(IMAGE_NAME.findall(path.read_text()))


def job_files():
    return sorted((ROOT / "cloud").glob("*.yaml")) + [ROOT / "config.yaml"]


def test_each_image_has_one_name_everywhere():
    for dockerfile, image in IMAGES.items():
        text = (ROOT / dockerfile).read_text()
        assert re.search(rf"docker build .*-t {re.escape(image)} ", text.replace("\\\n#", " "), re.S)
        assert f"docker push {image}\n" in text
        assert named_images(ROOT / dockerfile) == {image}
    pages = [ROOT / "README.md", ROOT / "docs/cloud.md"] + job_files()
    # Google's own prebuilt images (us-docker.pkg.dev/vertex-ai/...) may be named in prose only.
    named = {path.name: {n for n in named_images(path) if "/vertex-ai/" not in n} for path in pages}
    stray = {name: images - set(IMAGES.values()) for name, images in named.items() if images - set(IMAGES.values())}
    assert not stray, f"image names other than {sorted(IMAGES.values())}: {stray}"
    assert IMAGES["Dockerfile"] in named["README.md"]
    assert set(IMAGES.values()) <= named["cloud.md"]


def image_of(config):
    """(image URI, args) of every worker pool or replica that runs a container."""
    found = []
    for pool in config.get("workerPoolSpecs", []) + config.get("trialJobSpec", {}).get("workerPoolSpecs", []):
        found.append((pool["containerSpec"]["imageUri"], pool["containerSpec"].get("args", [])))
    master = config.get("trainingInput", {}).get("masterConfig")
    if master:
        found.append((master["imageUri"], []))
    return found


def engine_of(args):
    """The engine a job's args name (--engine=NAME), or None: the default, the Estimator engine."""
    named = [arg.split("=", 1)[1] for arg in args if arg.startswith("--engine=")]
    return named[-1] if named else None


@pytest.mark.parametrize("path", job_files(), ids=lambda p: p.name)
def test_job_files_run_the_image_of_their_engine(path):
    config = yaml.safe_load(path.read_text())
    assert "executorImageUri" not in path.read_text()  # no prebuilt TensorFlow TPU image to run it
    for image, args in image_of(config):
        assert image == IMAGES[IMAGE_OF_ENGINE[engine_of(args)]], path.name


def test_each_engine_has_a_vertex_job():
    engines = {engine_of(args) for path in sorted((ROOT / "cloud").glob("vertex_*.yaml"))
               for _, args in image_of(yaml.safe_load(path.read_text()))}
    assert engines == set(IMAGE_OF_ENGINE)


@pytest.mark.parametrize("path", sorted((ROOT / "cloud").glob("vertex_*.yaml")), ids=lambda p: p.name)
def test_job_args_are_trainer_flags(path):
    for _, args in image_of(yaml.safe_load(path.read_text())):
        typed, config_file = flags.parse_flags(args)  # SystemExit(2) on a flag the trainer lacks
        assert config_file is None and typed["use_tpu"] in (True, "true", "True")
        if engine_of(args) == "jax":  # JAX finds its VM's chips; the TPU settings are refused
            params, sources = checks.merge(table.DEFAULTS, {}, typed, "flags")
            checks.check_params(params, sources)  # ConfigError naming the first refused setting
            assert "tpu" not in typed
        else:
            assert typed["tpu"] == "local"


def load_fetch_pinned():
    spec = importlib.util.spec_from_file_location("fetch_pinned", ROOT / "cloud/fetch_pinned.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def served(tmp_path):
    """A file:// URL, its bytes and their sha256: what a pinned download would fetch."""
    data = b"libtpu stand-in \x00\x01" * 1000
    path = tmp_path / "served" / "libtpu.so"
    path.parent.mkdir()
    path.write_bytes(data)
    return path.as_uri(), data, hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("dest, kept_as", [("lib/libtpu.so", "lib/libtpu.so"), ("wheels/", "wheels/libtpu.so")])
def test_fetch_pinned_keeps_a_file_whose_hash_matches(served, tmp_path, dest, kept_as):
    url, data, sha256 = served
    path = load_fetch_pinned().fetch(url, sha256, f"{tmp_path}/{dest}")
    assert path == f"{tmp_path}/{kept_as}" and pathlib.Path(path).read_bytes() == data
    assert sorted(p.name for p in pathlib.Path(path).parent.iterdir()) == ["libtpu.so"]  # no part file left


@pytest.mark.parametrize("pin, error", [
    ("FILL_IN", "no sha256 pinned"),
    ("0" * 64, "sha256 [0-9a-f]{64}, pinned 0000"),
])
def test_fetch_pinned_refuses_a_missing_or_wrong_hash(served, tmp_path, pin, error):
    url, _, _ = served
    fetch_pinned = load_fetch_pinned()
    with pytest.raises(fetch_pinned.PinError, match=error):
        fetch_pinned.fetch(url, pin, f"{tmp_path}/out/libtpu.so")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.process
def test_fetch_pinned_command_fails_in_one_line(served, tmp_path):
    url, _, _ = served
    # A script the image runs by its path (python /tmp/fetch_pinned.py), not a module:
    # tests/user_commands.py starts modules only, so its environment is the user's here.
    result = subprocess.run([sys.executable, str(ROOT / "cloud/fetch_pinned.py"), url, "FILL_IN",
                             str(tmp_path / "libtpu.so")], capture_output=True, text=True, timeout=60,
                            env=user_env())
    assert result.returncode == 2 and not (tmp_path / "libtpu.so").exists()
    assert result.stderr.startswith(f"error: {url}: no sha256 pinned") and result.stderr.count("\n") == 1
