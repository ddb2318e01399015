"""The pipeline's PTransforms and DoFns: read rows, load + validate images, write shards.

Each composite here is tested on its own with TestPipeline (tests/preprocess/);
preprocess/pipeline.py only wires them together.

    python -m preprocess.jpeg_to_tfrecord --input_csv train=T.csv --input_csv eval=E.csv --output_dir OUT
"""
import collections
import json
import logging
import typing
import uuid
import zlib

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from common import dataset_files, image_uris, record_schema
from common.chunks import split_into_chunks
from preprocess import images, progress, shards, sources, work_pool

NAMESPACE = "preprocess"   # of the Beam counters
LOGGER_NAME = progress.LOGGER_NAME
_LOGGER = logging.getLogger(LOGGER_NAME)
ERRORS = "errors"          # tag of every dead-letter output
ERRORS_FILE = "errors-00000-of-00001.jsonl"  # DIR/..., one JSON dead letter per line
# Rows travel in lists of this many between the pipeline's steps: Beam's own
# cost per element (~150 us on the local runner, more than the rest of a row's
# work outside the image decode) is then paid per batch, not per image.
ROWS_PER_BATCH = 64
# The pool's unit of work: a few rows, so that handing work over costs little
# per image (~45 us per task) while a core that is free at the end of the job
# waits for at most this many images of another.
ROWS_PER_TASK = 8
# Tasks queued per pool thread: enough to keep every thread busy, few enough
# that the images held in memory stay small (~100 KB each).
IN_FLIGHT_PER_THREAD = 4


class Record(typing.NamedTuple):
    split: str
    label: int            # 0-based index into labels.txt
    source: str           # the image URI
    example: bytes        # serialized tf.train.Example (common/record_schema.py)
    conversions: tuple    # images.ConvertedImage.conversions


def dead_letter(row, reason, detail):
    """The JSON-able dead-letter record: what, from where, and why (names that are not
    UTF-8 shown escaped: sources.printable)."""
    return {"source": sources.printable(row.source), "label": sources.printable(row.label),
            "split": row.split, "origin": sources.printable(row.origin), "reason": reason,
            "detail": sources.printable(detail)}


def count_rejection(reason):
    Metrics.counter(NAMESPACE, f"rejected_{reason}").inc()


class ReadCsvRows(beam.PTransform):
    """(split or None, csv path) pairs -> {"rows", "rows_read", ERRORS} PCollections.

    "rows" holds lists of up to ROWS_PER_BATCH Rows, "rows_read" each batch's
    count of lines read. split None means "hash the uri into train/eval with
    eval_fraction". The batches are reshuffled before parsing so that the image
    work after this transform spreads over all workers instead of staying with
    one CSV reader.
    """

    def __init__(self, csv_inputs, eval_fraction=0.0):
        super().__init__()
        self._csv_inputs = list(csv_inputs)
        self._eval_fraction = eval_fraction

    def expand(self, pbegin):
        batches = (pbegin
                   | "ListCsvs" >> beam.Create(self._csv_inputs)
                   | "ReadLines" >> beam.FlatMap(read_line_batches_of_csv)
                   | "Spread" >> beam.Reshuffle())
        parsed = batches | "Parse" >> beam.ParDo(
            ParseCsvLinesFn(self._eval_fraction)).with_outputs(ERRORS, main="rows")
        return {"rows_read": batches | "Count" >> beam.Map(lambda batch: len(batch[2])),
                "rows": parsed.rows, ERRORS: parsed[ERRORS]}


def read_line_batches_of_csv(csv_input):
    """(split, path) -> (split, csv_dir, [(origin, line), ...]) over its non-blank lines."""
    split, path = csv_input
    csv_dir = path.rsplit("/", 1)[0] if "/" in path else "."
    _LOGGER.debug("Reading %s", path)
    for lines in split_into_chunks(sources.read_csv_lines(path), ROWS_PER_BATCH):
        yield split, csv_dir, lines


class ParseCsvLinesFn(beam.DoFn):
    """A batch of lines -> one list of Rows (if any parse) and a dead letter per bad line."""

    def __init__(self, eval_fraction):
        self._eval_fraction = eval_fraction

    def process(self, batch):
        split, csv_dir, lines = batch  # lines: [(origin, line), ...]
        yield from rows_and_dead_letters(
            lines,
            lambda line: sources.parse_csv_line(sources.from_transport(line[1]), line[0], csv_dir,
                                                split, self._eval_fraction),
            lambda line: sources.Row(source=sources.printable(sources.from_transport(line[1])),
                                     label="", split=split or "", origin=line[0]))


def rows_and_dead_letters(items, to_row, unparsed_row):
    """A batch of inputs -> one list of the Rows ``to_row`` made (if any), and a dead
    letter for each input it refused (InputRejected), shown as ``unparsed_row(item)``.
    Counts every input as read and every refusal by reason."""
    Metrics.counter(NAMESPACE, "rows_read").inc(len(items))
    rows = []
    for item in items:
        try:
            rows.append(to_row(item))
        except image_uris.InputRejected as err:
            count_rejection(err.reason)
            yield beam.pvalue.TaggedOutput(
                ERRORS, dead_letter(unparsed_row(item), err.reason, err.detail))
    if rows:
        yield rows


class ReadFolderRows(beam.PTransform):
    """ROOT/<label>/<file> -> {"rows", "rows_read", ERRORS} as ReadCsvRows, split by hash
    with eval_fraction."""

    def __init__(self, root, eval_fraction):
        super().__init__()
        self._root = root.rstrip("/")
        self._eval_fraction = eval_fraction

    def expand(self, pbegin):
        batches = (pbegin
                   | "Root" >> beam.Create([self._root])
                   | "ListFiles" >> beam.FlatMap(
                       lambda root: split_into_chunks(sources.list_folder_files(root),
                                                      ROWS_PER_BATCH))
                   | "Spread" >> beam.Reshuffle())
        parsed = batches | "ToRows" >> beam.ParDo(
            FolderFilesToRowsFn(self._root, self._eval_fraction)).with_outputs(ERRORS, main="rows")
        return {"rows_read": batches | "Count" >> beam.Map(len),
                "rows": parsed.rows, ERRORS: parsed[ERRORS]}


class FolderFilesToRowsFn(beam.DoFn):
    """A batch of file paths -> one list of Rows (if any) and a dead letter per bad path."""

    def __init__(self, root, eval_fraction):
        self._root = root
        self._eval_fraction = eval_fraction

    def process(self, paths):
        yield from rows_and_dead_letters(
            paths,
            lambda path: sources.row_from_folder_file(sources.from_transport(path), self._root,
                                                      self._eval_fraction),
            lambda path: sources.Row(source=sources.printable(sources.from_transport(path)),
                                     label="", split="", origin=self._root))


class DeriveLabels(beam.PTransform):
    """Row batches -> a single sorted list of their distinct labels (for a side input).

    Computed from the rows themselves, in the same job, so the label list and
    the label ids in the records cannot disagree. One combine: each worker
    sends its set of labels, not its rows. No rows at all gives no element
    (no default-value step, one stage less); readers use as_labels_side_input.
    """

    def expand(self, rows):
        return (rows
                | "Labels" >> beam.FlatMap(lambda batch: {row.label for row in batch})
                | "Distinct" >> beam.CombineGlobally(SortedDistinctFn()).without_defaults())


def as_labels_side_input(labels):
    """The label list as a side input: [] when there were no rows to derive it from."""
    return beam.pvalue.AsSingleton(labels, default_value=[])


class SortedDistinctFn(beam.CombineFn):
    """Values -> the sorted list of the distinct ones."""

    def create_accumulator(self):
        return set()

    def add_input(self, seen, value):
        seen.add(value)
        return seen

    def merge_accumulators(self, accumulators):
        return set().union(*accumulators)

    def extract_output(self, seen):
        return sorted(seen)


class ProcessImages(beam.PTransform):
    """Row batches + labels (side input) -> {"records", ERRORS}: read, validate, convert,
    serialize; one Record or dead letter per row.

    threads > 1: the per-image work runs in a process-wide pool of that many
    threads (preprocess/work_pool.py), which balances the load across cores
    when the local runner's static split does not. total: a singleton PCollection of
    the rows to process (CountRows), for the progress line's share and time left
    (preprocess/progress.py); processes: how many worker processes share the work
    (progress.UNKNOWN on a remote runner).
    """

    def __init__(self, labels, max_pixels, resize, jpeg_quality, threads=1, total=None,
                 processes=1):
        super().__init__()
        self._labels = labels
        self._total = total
        self._fn = ProcessImageFn(max_pixels, resize, jpeg_quality, threads, processes)

    def expand(self, rows):
        total = self._total if self._total is not None else (
            rows.pipeline | "NoTotal" >> beam.Create([0]))
        outputs = rows | "Process" >> beam.ParDo(
            self._fn, as_labels_side_input(self._labels),
            beam.pvalue.AsSingleton(total, default_value=0)).with_outputs(ERRORS, main="records")
        return {"records": outputs.records, ERRORS: outputs[ERRORS]}


class CountRows(beam.PTransform):
    """Row batches -> the number of rows, one element (none when there are no rows: read it
    with a default, as ProcessImages does)."""

    def expand(self, rows):
        return (rows | "Sizes" >> beam.Map(len)
                | "Sum" >> beam.CombineGlobally(sum).without_defaults())


class ProcessImageFn(beam.DoFn):
    """A batch of rows -> one Record, or one dead-letter dict with the reason, per row.

    The work of a row may finish while a later batch is processed: each result
    is emitted with its own batch's window and timestamp, and counted on the
    bundle's thread (Beam's counters do not see pool threads).
    """

    def __init__(self, max_pixels, resize, jpeg_quality, threads=1, processes=1):
        self._max_pixels = max_pixels
        self._resize = resize
        self._jpeg_quality = jpeg_quality
        self._threads = threads
        self._processes = processes
        self._job = uuid.uuid4().hex  # pickled with the DoFn: its instances share one tracker

    def setup(self):
        self._label_ids = {}
        self._labels_seen = None
        self._progress = progress.process_tracker(self._job, "images")
        self._total = 0

    def start_bundle(self):
        self._queue = work_pool.WorkQueue(
            self._threads, limit=IN_FLIGHT_PER_THREAD * max(1, self._threads))

    def process(self, rows, labels, total, windowed_batch=beam.DoFn.WindowedValueParam):
        label_ids = self._label_index(labels)
        self._total = total
        for task in split_into_chunks(rows, ROWS_PER_TASK):
            due = self._queue.submit(windowed_batch, process_rows, task, label_ids,
                                     self._max_pixels, self._resize, self._jpeg_quality)
            for windowed, future in due:
                yield from self._emit(windowed, future.result())

    def finish_bundle(self):
        for windowed, future in self._queue.drain():
            yield from self._emit(windowed, future.result())

    def _emit(self, windowed_batch, outcomes):
        """Finished rows' Records and dead letters, in their batch's window."""
        for row, outcome in outcomes:
            if isinstance(outcome, Record):
                for conversion in outcome.conversions:
                    Metrics.counter(NAMESPACE, f"converted_{conversion}").inc()
                self._progress.add(False, self._total, self._processes)
                yield windowed_batch.with_value(outcome)
            else:
                count_rejection(outcome.reason)
                self._progress.add(True, self._total, self._processes)
                yield beam.pvalue.TaggedOutput(ERRORS, windowed_batch.with_value(
                    dead_letter(row, outcome.reason, outcome.detail)))

    def _label_index(self, labels):
        if labels is not self._labels_seen:  # the side input is one object per bundle
            self._label_ids = dataset_files.label_ids(labels)
            self._labels_seen = labels
        return self._label_ids


def process_rows(rows, label_ids, max_pixels, resize, jpeg_quality):
    """[(row, its Record or the InputRejected that refused it)]; any other
    error (a bug, a transient cloud error) is raised, failing the bundle for a retry."""
    outcomes = []
    for row in rows:
        try:
            outcomes.append((row, process_row(row, label_ids, max_pixels, resize,
                                              jpeg_quality)))
        except image_uris.InputRejected as err:
            outcomes.append((row, err))
    return outcomes


def process_row(row, label_ids, max_pixels, resize, jpeg_quality):
    """The per-image work shared by the DoFn and the benchmark baselines: Row -> Record."""
    if row.label not in label_ids:
        raise image_uris.InputRejected(image_uris.UNKNOWN_LABEL,
                                  f"label {row.label!r} is not in labels.txt")
    data = sources.read_image_bytes(sources.path_to_open(row))
    image = images.convert_image(data, max_pixels, resize, jpeg_quality)
    label = label_ids[row.label]
    example = record_schema.make_example(image.jpeg, image.height, image.width, label,
                                         row.label, row.source)
    return Record(row.split, label, row.source, example, image.conversions)


class WriteShards(beam.PTransform):
    """Records -> TFRecord shard files per split; returns one stats dict per shard written.

    Each bundle writes its records into temporary pieces right where they were
    made (the records' step and this one fuse), so only small stats go on: no
    image bytes cross a shuffle. The pieces are then planned into shards
    (shards.plan_shards: by size, or num_shards with the source URI's hash as
    the shard) and each shard is assembled (a whole piece renamed, smaller ones
    joined byte for byte), in parallel.
    The temporary directory is removed once every shard is written.
    """

    def __init__(self, output_dir, labels, num_shards=None, splits=()):
        super().__init__()
        self._output_dir = output_dir
        self._labels = labels
        self._num_shards = num_shards
        self._splits = list(splits)

    def expand(self, records):
        temp_dir = shards.make_temp_dir(self._output_dir)
        pieces = records | "WritePieces" >> beam.ParDo(
            WritePiecesFn(temp_dir, self._num_shards))
        # Every piece's stats reach the plan as a side list: unlike a ToList
        # combine, that adds no grouping step or default-value stage.
        shard_stats = (records.pipeline
                       | "PlanOnce" >> beam.Create([None])
                       | "Plan" >> beam.FlatMap(plan_shards_once, beam.pvalue.AsList(pieces),
                                                self._splits, self._num_shards)
                       | "Spread" >> beam.Reshuffle()
                       | "Join" >> beam.Map(join_shard, self._output_dir,
                                            as_labels_side_input(self._labels)))
        _ = (records.pipeline
             | "Once" >> beam.Create([temp_dir])
             | "RemoveTemp" >> beam.Map(remove_temp_dir, beam.pvalue.AsList(shard_stats)))
        return shard_stats


def plan_shards_once(_, pieces, splits, num_shards):
    """The job's single plan: every piece's stats -> (split, shard, count, pieces) per shard."""
    return shards.plan_shards(pieces, splits, num_shards)


class WritePiecesFn(beam.DoFn):
    """Records -> temporary TFRecord pieces; yields each piece's stats when the bundle ends."""

    def __init__(self, temp_dir, num_shards):
        self._temp_dir = temp_dir
        self._num_shards = num_shards

    def start_bundle(self):
        self._writer = shards.PieceWriter(self._temp_dir)

    def process(self, record):
        self._writer.write(record.split, shard_of(record.source, self._num_shards),
                           record.example, record.label, record.conversions)

    def finish_bundle(self):
        for piece in self._writer.close():
            yield beam.transforms.window.GlobalWindows.windowed_value(piece)


def shard_of(source, num_shards):
    """The shard of a forced --num_shards (None: decided later by size).

    Hashing the URI (not the label) gives every shard a mix of all labels, and
    crc32 (unlike hash()) gives every worker the same answer.
    """
    if not num_shards:
        return None
    return zlib.crc32(source.encode("utf-8")) % num_shards


def join_shard(planned, output_dir, labels):
    """(split, shard, count, pieces) -> writes the shard, returns its stats.

    Joined pieces stay until every shard is written (remove_temp_dir), so a
    retried join still finds them; a retried move finds its shard in place.
    """
    split, shard, num_shards, pieces = planned
    path = shards.shard_path(output_dir, split, shard, num_shards)
    shards.assemble_shard(path, [piece["path"] for piece in pieces])
    per_label, converted = collections.Counter(), collections.Counter()
    for piece in pieces:
        per_label.update({labels[label]: n for label, n in piece["per_label"].items()})
        converted.update(piece["converted"])
    count = sum(piece["records"] for piece in pieces)
    Metrics.counter(NAMESPACE, f"records_written_{split}").inc(count)
    _LOGGER.debug("Wrote %d records to %s", count, path)  # the summary table counts them
    return {"split": split, "shard": shard, "num_shards": num_shards, "records": count,
            "per_label": dict(per_label), "converted": dict(converted)}


def remove_temp_dir(temp_dir, _shard_stats):
    """Runs after every shard is joined (the side input): all pieces, retried bundles' too."""
    shards.delete_matching([FileSystems.join(temp_dir, "*")])
    if not temp_dir.startswith("gs://") and FileSystems.exists(temp_dir):
        FileSystems.delete([temp_dir])  # a local folder; on GCS folders do not exist


class WriteDatasetFiles(beam.PTransform):
    """Writes labels.txt, metadata.json and the dead letters from the job's own outputs;
    returns the metadata.

    Inputs (a dict): "labels" (singleton list), "shard_stats" (WriteShards'
    output), "errors" (dead-letter dicts), "rows_read" (counts of input rows
    read, one per batch; summed here, which costs no combine step). A
    split or shard that received no records still gets a (valid, empty) shard
    file, so the "-of-N" names always add up. The dead letters go to
    DIR/errors-00000-of-00001.jsonl (written even when empty), counted by
    reason as they are written; they are streamed, never held in a list.
    """

    def __init__(self, output_dir, splits):
        super().__init__()
        self._output_dir = output_dir
        self._splits = list(splits)

    def expand(self, inputs):
        return (inputs["labels"].pipeline
                | "Once" >> beam.Create([None])
                | "Finish" >> beam.Map(
                    write_dataset_files, self._output_dir, self._splits,
                    labels=as_labels_side_input(inputs["labels"]),
                    shard_stats=beam.pvalue.AsList(inputs["shard_stats"]),
                    errors=beam.pvalue.AsIter(inputs["errors"]),
                    rows_read=beam.pvalue.AsList(inputs["rows_read"])))


def write_dataset_files(_, output_dir, splits, labels, shard_stats, errors, rows_read):
    """rows_read: the per-batch counts of input rows."""
    rejected = write_errors(output_dir, errors)
    split_stats = summarize_splits(splits, labels, shard_stats)
    write_missing_shards(output_dir, split_stats, shard_stats)
    converted = collections.Counter()  # images re-encoded, by why
    for stats in shard_stats:
        converted.update(stats["converted"])
    meta = dataset_files.build_metadata(labels, split_stats, dict(rejected), sum(rows_read),
                                   converted=dict(converted))
    shards.write_text(FileSystems.join(output_dir, dataset_files.LABELS_FILE),
                      dataset_files.labels_to_text(labels))
    shards.write_text(FileSystems.join(output_dir, dataset_files.METADATA_FILE),
                      dataset_files.metadata_to_json(meta))
    return meta


def write_errors(output_dir, errors):
    """Dead-letter dicts -> one JSON line each in ERRORS_FILE; returns {reason: count}."""
    rejected = collections.Counter()
    with FileSystems.create(FileSystems.join(output_dir, ERRORS_FILE), mime_type="text/plain",
                            compression_type="uncompressed") as f:
        for error in errors:
            rejected[error["reason"]] += 1
            f.write(json.dumps(error, sort_keys=True).encode("utf-8") + b"\n")
    return dict(sorted(rejected.items()))


def summarize_splits(splits, labels, shard_stats):
    """Per-split records, per-label counts and shard counts from the shard stats."""
    summary = {split: {"records": 0, "per_label": {label: 0 for label in labels}, "shards": 1}
               for split in splits}
    for stats in shard_stats:
        split = summary[stats["split"]]
        split["records"] += stats["records"]
        split["shards"] = stats["num_shards"]
        for label, count in stats["per_label"].items():
            split["per_label"][label] += count
    return summary


def write_missing_shards(output_dir, split_stats, shard_stats):
    written = {(s["split"], s["shard"]) for s in shard_stats}
    for split, stats in split_stats.items():
        for shard in range(stats["shards"]):
            if (split, shard) not in written:
                shards.write_records(
                    shards.shard_path(output_dir, split, shard, stats["shards"]), [])
