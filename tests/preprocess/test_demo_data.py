"""The bundled demo data, and the default (multi-process, offline) run over it, as make demo does."""
import io
import json
import time

import pytest
from PIL import Image

from preprocess import demo_data, jpeg_to_tfrecord


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "images"
    demo_data.main(["--output_dir", str(out)])
    return out


def test_demo_data_is_the_uci_digits_as_rgb_jpegs(demo_dir):
    train = (demo_dir / "train.csv").read_text().splitlines()
    evals = (demo_dir / "eval.csv").read_text().splitlines()
    assert (len(train), len(evals)) == (1457, 340)
    assert sorted(p.name for p in demo_dir.iterdir() if p.is_dir()) == [str(d) for d in range(10)]
    path, label = train[0].split(",")
    assert path.startswith(str(demo_dir)) and path.split("/")[-2] == label
    image = Image.open(io.BytesIO(open(path, "rb").read()))
    assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (32, 32))
    assert not {line.split(",")[0] for line in train} & {line.split(",")[0] for line in evals}


def test_rerun_is_fast_and_rewrites_nothing(demo_dir):
    first = demo_dir / "0" / "0000.jpg"
    before = first.stat().st_mtime_ns
    start = time.monotonic()
    assert demo_data.build_demo_data(str(demo_dir)) == {"train": 1457, "eval": 340}
    assert time.monotonic() - start < 0.5
    assert first.stat().st_mtime_ns == before


def test_changed_settings_rebuild(demo_dir, monkeypatch):
    monkeypatch.setattr(demo_data, "VERSION", demo_data.VERSION + 1)
    assert not demo_data.is_complete(str(demo_dir))


def test_default_local_run_on_demo_data(demo_dir, tmp_path):
    """No runner flags: the FnApiRunner with one worker thread per core, offline."""
    meta = jpeg_to_tfrecord.run([
        "--input_csv", f"train={demo_dir}/train.csv", "--input_csv", f"eval={demo_dir}/eval.csv",
        "--output_dir", str(tmp_path)])
    assert {s: v["records"] for s, v in meta["splits"].items()} == {"train": 1457, "eval": 340}
    assert meta["rows_read"] == 1797 and meta["rejected_total"] == 0
    assert meta["converted"] == {}  # the demo JPEGs are kept byte for byte
    assert meta["labels"] == [str(d) for d in range(10)]
    assert sum(meta["splits"]["train"]["per_label"].values()) == 1457
    assert json.loads((tmp_path / "metadata.json").read_text())["num_classes"] == 10
