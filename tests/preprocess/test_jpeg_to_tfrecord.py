"""The entry point end to end: hostile corpus with exact counts, round trip, flags, runners.

    .venv/bin/python -m pytest -q tests/preprocess/test_jpeg_to_tfrecord.py
"""
import ast
import json
import os
import pathlib

import pytest

from common import beam_pipeline
from preprocess import jpeg_to_tfrecord, pipeline, summary
from tests.conftest import encode_image, pattern_image
from tests.preprocess.conftest import IN_PROCESS, read_split

EXPECTED_REJECTED = {"corrupt_image": 1, "empty_file": 1, "malformed_csv_line": 3,
                     "missing_file": 1, "not_an_image": 1, "too_many_pixels": 1,
                     "unknown_label": 1, "unreadable_file": 1}


@pytest.fixture
def hostile_run(hostile_corpus, capsys):
    out = hostile_corpus["dir"] / "out"
    meta = jpeg_to_tfrecord.run([
        "--input_csv", f"train={hostile_corpus['train']}",
        "--input_csv", f"eval={hostile_corpus['eval']}",
        "--labels_file", str(hostile_corpus["labels"]),
        "--output_dir", str(out)] + IN_PROCESS)
    return meta, out, capsys.readouterr().out


def test_hostile_corpus_exact_counts(hostile_run):
    meta, out, _ = hostile_run
    assert meta["splits"]["train"]["records"] == 9
    assert meta["splits"]["train"]["per_label"] == {"cat": 4, "dog": 5}
    assert meta["splits"]["eval"]["records"] == 0
    assert meta["rejected"] == EXPECTED_REJECTED
    assert meta["converted"] == {"format_bmp": 1, "format_gif": 1, "format_png": 2,
                                 "format_webp": 1, "mode_cmyk": 1, "mode_l": 1,
                                 "mode_p": 1, "mode_rgba": 1}
    assert json.loads((out / "metadata.json").read_text()) == meta
    assert (out / "labels.txt").read_text() == "cat\ndog\n"


def test_rows_read_equals_written_plus_rejected(hostile_run):
    meta, out, summary = hostile_run
    written = sum(split["records"] for split in meta["splits"].values())
    assert meta["rows_read"] == 19 == written + meta["rejected_total"]
    assert "rows read 19 = written 9 + rejected 10: OK" in summary
    for reason, count in EXPECTED_REJECTED.items():
        assert f"{count:>10}  {reason}" in summary


def test_every_rejection_is_a_dead_letter_with_source_label_and_reason(hostile_run):
    _, out, _ = hostile_run
    letters = [json.loads(line) for path in out.glob("errors-*.jsonl")
               for line in path.read_text().splitlines()]
    by_reason = {}
    for letter in letters:
        by_reason[letter["reason"]] = by_reason.get(letter["reason"], 0) + 1
        assert letter["source"] and letter["detail"] and letter["origin"]
    assert by_reason == EXPECTED_REJECTED
    malformed = sorted(l["origin"] for l in letters if l["reason"] == "malformed_csv_line")
    assert malformed == ["train.csv:13", "train.csv:14", "train.csv:15"]
    fish = [l for l in letters if l["reason"] == "unknown_label"]
    assert fish[0]["label"] == "fish" and fish[0]["source"].endswith("images/fish.jpg")


@pytest.mark.parametrize("mode", [pytest.param("multi_processing", marks=pytest.mark.process),
                                  "multi_threading"])
def test_other_local_modes_give_the_same_outputs(hostile_corpus, hostile_run, mode):
    """multi_processing: DoFns pickled into worker processes that write the pieces;
    multi_threading: two worker threads sharing one image pool."""
    meta, _, _ = hostile_run
    out = hostile_corpus["dir"] / mode
    again = jpeg_to_tfrecord.run([
        "--input_csv", f"train={hostile_corpus['train']}",
        "--input_csv", f"eval={hostile_corpus['eval']}",
        "--labels_file", str(hostile_corpus["labels"]), "--output_dir", str(out),
        "--direct_running_mode", mode, "--direct_num_workers", "2"])
    assert again == meta
    assert len(read_split(out, "train")) == 9
    assert not list(out.glob("_temp-*/*"))


def test_records_read_back_with_the_trainer_parse_spec(hostile_run):
    import tensorflow as tf
    from common import record_schema
    _, out, _ = hostile_run
    records = read_split(out, "train")
    assert len(records) == 9
    for record in records:
        image = tf.io.decode_jpeg(record[record_schema.ENCODED]).numpy()
        assert image.shape == (record[record_schema.HEIGHT], record[record_schema.WIDTH], 3)
        assert record[record_schema.LABEL_TEXT].decode() == ["cat", "dog"][record[record_schema.LABEL]]
    names = sorted(r[record_schema.FILENAME].decode().rsplit("/", 1)[1] for r in records)
    assert names == ["alpha.png", "anim.gif", "cmyk.jpg", "good.jpg", "good2.jpg",
                     "gray.jpg", "photo.webp", "png_named.jpg", "scan.bmp"]
    assert read_split(out, "eval") == []


def test_no_usable_row_is_an_error_and_publishes_nothing(tmp_path):
    # No rows means no labels to derive: every step that reads the label list must see []
    # rather than fail on a missing side input; the run then refuses to publish an empty
    # dataset, naming the reasons, and keeps the dead letters of every line.
    csv_path = tmp_path / "bad.csv"
    csv_path.write_text('only_one_field\n"unterminated,x\na.jpg,\n')
    out = tmp_path / "out"
    with pytest.raises(summary.NoUsableRows, match=r"no row of bad.csv could be used, all 6 "
                       r"were rejected \(malformed_csv_line: 6\): expected 'uri,label' lines"):
        jpeg_to_tfrecord.run(["--input_csv", f"train={csv_path}", "--input_csv",
                              f"eval={csv_path}", "--output_dir", str(out)] + IN_PROCESS)
    assert not list(out.rglob("metadata.json")) and not list(out.rglob("*.tfrecord"))
    assert not list(out.rglob("labels.txt"))
    (letters,) = out.glob("_staging-*/errors-00000-of-00001.jsonl")
    assert len(letters.read_text().splitlines()) == 6


def test_original_jpeg_bytes_are_kept(tmp_path):
    images = {f"{label}{i}.jpg": encode_image(pattern_image(20 + i, 30, seed=i))
              for i, label in enumerate("abab")}
    for name, data in images.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "all.csv").write_text("".join(f"{n},{n[0]}\n" for n in images))
    meta = jpeg_to_tfrecord.run(["--input_csv", str(tmp_path / "all.csv"), "--eval_fraction",
                                 "0", "--output_dir", str(tmp_path / "out")] + IN_PROCESS)
    from common import record_schema
    records = read_split(tmp_path / "out", "train")
    assert meta["labels"] == ["a", "b"] and meta["splits"]["train"]["records"] == 4
    for record in records:
        name = record[record_schema.FILENAME].decode().rsplit("/", 1)[1]
        assert record[record_schema.ENCODED] == images[name]
        assert record[record_schema.LABEL] == "ab".index(name[0])


def test_folder_tree_with_hash_split_and_forced_shards(tmp_path):
    root = tmp_path / "photos"
    for i in range(30):
        label = ["daisy", "rose", "tulip"][i % 3]
        (root / label).mkdir(parents=True, exist_ok=True)
        (root / label / f"{i}.jpg").write_bytes(encode_image(pattern_image(12, 12, seed=i)))
    out = tmp_path / "out"
    argv = ["--input_dir", str(root), "--eval_fraction", "0.3", "--num_shards", "2",
            "--output_dir", str(out)] + IN_PROCESS
    meta = jpeg_to_tfrecord.run(argv)
    train, evals = meta["splits"]["train"]["records"], meta["splits"]["eval"]["records"]
    assert train + evals == 30 and 0 < evals < 20
    assert meta["labels"] == ["daisy", "rose", "tulip"]
    assert sorted(p.name for p in out.glob("*.tfrecord")) == [
        "eval-00000-of-00002.tfrecord", "eval-00001-of-00002.tfrecord",
        "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    # A rerun with another shard count replaces the old shards instead of adding to them.
    rerun = jpeg_to_tfrecord.run(argv[:4] + ["--num_shards", "1"] + argv[6:])
    assert rerun["splits"] == {s: dict(v, shards=1) for s, v in meta["splits"].items()}
    assert sorted(p.name for p in out.glob("*.tfrecord")) == [
        "eval-00000-of-00001.tfrecord", "train-00000-of-00001.tfrecord"]


@pytest.mark.parametrize("argv, message", [
    ([], "either --input_csv"),
    (["--input_csv", "a.csv", "--input_dir", "d"], "not both"),
    (["--input_csv", "train={tmp}/nothing*.csv"], "matches no file"),
    (["--input_csv", "train={tmp}/x.csv", "--input_csv", "train={tmp}/x.csv"], "more than once"),
    (["--input_csv", "train={tmp}/x.csv", "--input_csv", "{tmp}/x.csv"], "has no SPLIT="),
    (["--input_csv", "train={tmp}/x.csv", "--eval_fraction", "0.2"], "--eval_fraction=0.2"),
    (["--input_csv", "{tmp}/x.csv", "--eval_fraction", "1.5"], "--eval_fraction=1.5"),
    (["--input_csv", "{tmp}/x.csv", "--num_shards", "-1"], "--num_shards=-1"),
    (["--input_csv", "{tmp}/x.csv", "--jpeg_quality", "101"], "--jpeg_quality=101"),
    (["--input_csv", "{tmp}/x.csv", "--image_threads", "-1"], "--image_threads=-1"),
    (["--input_dir", "{tmp}/empty"], "has no files in label folders"),
])
def test_bad_flags_are_rejected_naming_the_value(tmp_path, argv, message):
    (tmp_path / "x.csv").write_text("a.jpg,a\n")
    (tmp_path / "empty").mkdir()
    argv = [arg.format(tmp=tmp_path) for arg in argv] + ["--output_dir", str(tmp_path / "o")]
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        jpeg_to_tfrecord.parse_config(argv)


@pytest.mark.parametrize("requested, beam_args, expected", [
    (0, [], os.cpu_count()),  # local threads: one shared pool, a thread per core
    (0, ["--direct_running_mode", "in_memory"], os.cpu_count()),
    (0, ["--direct_running_mode", "multi_processing"], 1),
    (0, ["--runner", "DataflowRunner"], 1),
    (3, ["--runner", "DataflowRunner"], 3),
])
def test_image_threads_by_runner_unless_given(requested, beam_args, expected):
    options = beam_pipeline.build_pipeline_options(beam_args)
    assert pipeline.choose_image_threads(requested, options) == expected


def functions_importing(path):
    """{function name: its import statements} of a module's source, nested functions included."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            imports = [ast.unparse(inner) for inner in ast.walk(node)
                       if isinstance(inner, (ast.Import, ast.ImportFrom))]
            if imports:
                found[node.name] = imports
    return found


def test_the_entry_point_imports_beams_side_in_one_place():
    """The command imports Beam's side once, after its flags (--help answers at once: the test of
    that is tests/common/test_entry_points.py); that side imports at its top, as modules do."""
    folder = pathlib.Path(jpeg_to_tfrecord.__file__).parent
    assert functions_importing(folder / "jpeg_to_tfrecord.py") == {
        "import_pipeline": ["from preprocess import pipeline"]}
    assert functions_importing(folder / "pipeline.py") == {}


def test_local_run_never_tries_prism(hostile_corpus, monkeypatch):
    """Beam 2.72's DirectRunner tries Prism (a downloaded binary) first; ours must not."""
    from apache_beam.runners.portability import prism_runner
    calls = []
    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline",
                        lambda *args, **kwargs: calls.append(args) or 1 / 0)
    meta = jpeg_to_tfrecord.run(["--input_csv", str(hostile_corpus["train"]), "--output_dir",
                                 str(hostile_corpus["dir"] / "o")] + IN_PROCESS)
    assert calls == [] and meta["rows_read"] == 15
