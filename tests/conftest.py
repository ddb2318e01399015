"""Shared fixtures: real JPEGs made in the test, and tiny real TFRecord datasets.

    .venv/bin/python -m pytest tests
"""
import contextlib
import fcntl
import io
import os
import pathlib
import random
import signal
import socket
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# XLA:CPU without LLVM's optimisation passes, here and in every command a test starts: the tests
# check what compiled code does, not how fast, and a tiny JAX run then takes 12 s of CPU, not 20
# (MobileNetV2's TensorFlow XLA step 4 s, not 49: tests/trainer/test_xla_check.py). The
# benchmarks (bench/) compile as a user's run does.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 "
                                   "--xla_llvm_disable_expensive_passes=true")
# A suite started with Ctrl-C ignored (`make test &` in a script, nohup) would hand that on to
# every command it starts, and the Ctrl-C tests' commands would then never see theirs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import numpy as np
import pytest
from PIL import Image

from common import first_import

# The heavy libraries' first imports (TensorFlow's, at collection) without the cyclic collector, as
# every command's (common/first_import.py): a third of the import's CPU in each worker, and the
# worker's later full collections skip what the imports made.
first_import.uncollected_imports()


def encode_image(array, fmt="JPEG", mode=None, **save_args):
    """Encodes a uint8 array ([h, w] or [h, w, c]) with PIL; returns the file bytes."""
    image = Image.fromarray(np.asarray(array, dtype=np.uint8))
    if mode:
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save_args)
    return buffer.getvalue()


def pattern_image(height, width, seed, channels=3):
    """A deterministic image with structure (gradients + noise), not a flat colour."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = (x * 255 // max(width - 1, 1) + y * 255 // max(height - 1, 1)) // 2
    planes = [(base + rng.integers(0, 40, size=base.shape) + 60 * c) % 256
              for c in range(channels)]
    image = np.stack(planes, axis=-1).astype(np.uint8)
    return image[..., 0] if channels == 1 else image


def free_ports(count):
    """count distinct loopback ports the OS reports free now (all bound at once, then closed)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port():
    """One loopback port the OS reports free now."""
    return free_ports(1)[0]


def free_port_range(count):
    """The first of count consecutive free ports (gcloud --start-port takes a block), below the
    range the OS hands out to connections and to free_port: a port of the block that was free when
    chosen stays free while the job starts. A block inside it once lost a port to another test's
    connection in those seconds, and the job's parameter server died, its other tasks waiting."""
    low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) \
        if os.path.exists("/proc/sys/net/ipv4/ip_local_port_range") else 32768
    rng = random.Random()
    for _ in range(50):
        start = rng.randrange(20000, max(low, 20000 + count + 1) - count)
        sockets = []
        try:
            for port in range(start, start + count):
                sockets.append(socket.socket())
                sockets[-1].bind(("", port))  # every address, as the job's servers listen
            return start
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


@contextlib.contextmanager
def building_from_checkout():
    """Held while a test builds the package from this checkout (setuptools writes
    tpu_image_classifier.egg-info/ into it): make test's two pytest-xdist workers take turns."""
    with open(pathlib.Path(__file__).resolve().parents[1] / "setup.py") as setup_py:
        fcntl.flock(setup_py, fcntl.LOCK_EX)  # released when the file is closed
        yield


FAST_ONLY_ENV = "TESTS_FAST_ONLY"  # set by make test-fast
RUNNING = []  # the test item being set up, run or torn down
UNMARKED = {}  # {test id: why it fails}: what a guard below refused, even where a library caught it


def pytest_configure(config):
    """Under make test-fast, a test (its fixtures included) that starts a child process or runs a
    trainer mode without the mark that says so fails, naming the mark: the fast suite stays fast
    because the marks stay true."""
    if os.environ.get(FAST_ONLY_ENV) != "1":
        return
    from trainer.run import driver
    subprocess.Popen.__init__ = refusing_unless_marked(
        subprocess.Popen.__init__, "process", "starts a child process")
    driver.run_mode = refusing_unless_marked(driver.run_mode, "trains", "runs a trainer mode")


# The longest test files of make test, longest first (tests/longest_files.txt, measured). They
# are handed out first, so the two xdist workers (--dist loadfile) do not end with one of them
# running a long file alone. xdist would otherwise order the files by their number of tests
# (its --loadscope-reorder, on by default), which hands out last the long files of one or two
# tests: the Makefile's --no-loadscope-reorder keeps this order.
LONGEST_FILES_LIST = pathlib.Path(__file__).with_name("longest_files.txt")


def longest_files(listing=LONGEST_FILES_LIST):
    """{test file path: its rank}, the longest 0, from the seconds the listing gives each path."""
    timed = []
    for line in listing.read_text().splitlines():
        fields = line.split("#")[0].split()
        if fields:
            timed.append((-float(fields[0]), fields[1]))
    return {path: rank for rank, (_, path) in enumerate(sorted(timed))}


def sort_longest_first(items, rank):
    """The ranked files first, by rank, then the others; each file's tests in their order."""
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_modifyitems(items):
    sort_longest_first(items, longest_files())


def refusing_unless_marked(function, mark, what):
    def guarded(*args, **kwargs):
        if RUNNING and not RUNNING[-1].get_closest_marker(mark):
            message = f"this test {what}: mark it @pytest.mark.{mark} (make test-fast runs none)"
            UNMARKED.setdefault(RUNNING[-1].nodeid, message)  # failed at its end if a thread swallows this
            pytest.fail(message, pytrace=False)
        return function(*args, **kwargs)
    return guarded


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    RUNNING.append(item)
    try:
        yield
    finally:
        RUNNING.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A refusal of the guard above that a library's thread swallowed still fails the test."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        UNMARKED.pop(item.nodeid, None)  # reported already
    elif call.when == "teardown" and item.nodeid in UNMARKED:
        report.outcome, report.longrepr = "failed", UNMARKED.pop(item.nodeid)


@pytest.fixture
def make_jpeg():
    """make_jpeg(height=32, width=32, seed=0, mode=None) -> JPEG bytes."""
    def _make(height=32, width=32, seed=0, mode=None, fmt="JPEG"):
        return encode_image(pattern_image(height, width, seed), fmt=fmt, mode=mode)
    return _make


def write_dataset(out, counts, labels=("cat", "dog", "fish"), size=24, shards=2):
    """Writes real TFRecord shards plus labels.txt and metadata.json through the shared schema
    into the new directory out (a pathlib.Path) and returns it."""
    import tensorflow as tf
    from common import dataset_files, record_schema

    out.mkdir()
    splits = {}
    for split, count in counts.items():
        per_label = {label: 0 for label in labels}
        writers = [tf.io.TFRecordWriter(str(out / f"{split}-{i:05d}-of-{shards:05d}.tfrecord"))
                   for i in range(shards)]
        for i in range(count):
            label = i % len(labels)
            per_label[labels[label]] += 1
            jpeg = encode_image(pattern_image(size, size, seed=hash((split, i)) % 10_000))
            writers[i % shards].write(record_schema.make_example(
                jpeg, size, size, label, labels[label], f"{split}/{i}.jpg"))
        for writer in writers:
            writer.close()
        splits[split] = {"records": count, "per_label": per_label, "shards": shards}
    (out / dataset_files.LABELS_FILE).write_text(dataset_files.labels_to_text(labels))
    meta = dataset_files.build_metadata(labels, splits, rejected={}, rows_read=sum(counts.values()))
    (out / dataset_files.METADATA_FILE).write_text(dataset_files.metadata_to_json(meta))
    return out


@pytest.fixture
def write_tfrecord_dataset(tmp_path):
    """write_tfrecord_dataset(counts={"train": 40, "eval": 11}, labels=("a","b","c"), ...):
    write_dataset into tmp_path/<name>; returns the dataset directory (a pathlib.Path)."""
    def _write(counts, labels=("cat", "dog", "fish"), size=24, shards=2, name="data"):
        return write_dataset(tmp_path / name, counts, labels, size, shards)
    return _write


class FakeTPUContext:
    """The one TPUContext method the input pipelines call, for a host of a multi-host slice."""

    def __init__(self, host, num_hosts, replicas_per_host):
        self.deployment = (f"/job:worker/task:{host}/device:CPU:0", host, num_hosts,
                           replicas_per_host)

    def current_input_fn_deployment(self):
        return self.deployment


@pytest.fixture
def fake_tpu_context():
    """FakeTPUContext(host, num_hosts, replicas_per_host): per-host sharding without a TPU."""
    return FakeTPUContext


@pytest.fixture(scope="session")
def gcs_emulator():
    """The session's one GCS emulator (tests/gcs_emulator.py), started on first use.
    STORAGE_EMULATOR_HOST is not set here: gcs_bucket sets it for each test that uses it."""
    from tests import gcs_emulator as emulator
    server = emulator.start()
    try:
        yield server
    finally:
        emulator.stop(server.proc)


@pytest.fixture
def gcs_bucket(gcs_emulator, monkeypatch):
    """A new, empty bucket of this test's own on the emulator, as a google.cloud.storage Bucket
    (anonymous client); STORAGE_EMULATOR_HOST points at the emulator while the test runs, and
    batch requests carry the part numbers the emulator needs (gcs_emulator.number_batch_parts)."""
    from google.cloud import storage
    from tests.gcs_emulator import number_batch_parts
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    number_batch_parts(monkeypatch)
    return storage.Client.create_anonymous_client().bucket(gcs_emulator.create_bucket())


@pytest.fixture(scope="session")
def repo_root():
    return pathlib.Path(__file__).resolve().parents[1]


# --- Batch prediction (trainer --mode predict and serving.batch_predict): one tiny trained
# run with an export, session-scoped so every test reads the same checkpoint and export. ---
LABELS = ("cat", "dog", "fish")
# A seconds-long train/eval/export round (as tests/trainer's TINY_FLAGS), 4-image predict batches.
RUN_FLAGS = {
    "image_size": "16", "cnn_filters": "4,8", "dense_units": "16", "train_batch_size": "8",
    "eval_batch_size": "8", "predict_batch_size": "4", "train_steps": "2", "steps_per_eval": "2",
    "warmup_steps": "1", "save_checkpoints_steps": "2", "num_warmup_images": "0",
    "shuffle_buffer": "16", "top_k": "5",
}
NUM_GOOD_IMAGES = 11  # not a multiple of predict_batch_size=4: the last batch is padded


def make_jpeg_bytes(seed, size=20):
    import tensorflow as tf
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels).numpy()


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """(output_dir, export_dir, data_dir) of a 2-step run on 16 train / 11 eval images, by the
    Estimator engine, or by the Keras engine where tensorflow-estimator is missing (.venv-keras)."""
    from tests.engines import HAS_ESTIMATOR
    from trainer import chain, task
    root = tmp_path_factory.mktemp("run")
    data = write_dataset(root / "data", {"train": 16, "eval": NUM_GOOD_IMAGES}, LABELS, size=20, shards=1)
    flags = dict(RUN_FLAGS, train_data_path=f"{data}/train-*", eval_data_path=f"{data}/eval-*",
                 output_dir=str(root / "out"), engine="estimator" if HAS_ESTIMATOR else "keras")
    params = chain.parse_params([f"--{k}={v}" for k, v in flags.items()])
    export_dir = task.load_engine(params["engine"])(params)
    return root / "out", export_dir, data


@pytest.fixture(scope="session")
def input_csv(tmp_path_factory):
    """A CSV of 11 good images (relative and labelled or not), a missing, an empty and a corrupt file."""
    root = tmp_path_factory.mktemp("images")
    lines = []
    for i in range(NUM_GOOD_IMAGES):
        (root / f"{i}.jpg").write_bytes(make_jpeg_bytes(1000 + i, size=20 + i))
        lines.append(f"{i}.jpg,{LABELS[i % 3]}" if i % 2 else str(root / f"{i}.jpg"))
    (root / "empty.jpg").write_bytes(b"")
    (root / "corrupt.jpg").write_bytes(make_jpeg_bytes(7)[:40])
    lines[3:3] = ["missing.jpg,cat", "empty.jpg", f"{root}/corrupt.jpg,dog"]
    (root / "images.csv").write_text("\n".join(lines) + "\n")
    return root / "images.csv"
