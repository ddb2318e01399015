"""The Beam side of preprocess.jpeg_to_tfrecord: a Config (what one run is asked to do) -> its
inputs checked through Beam's FileSystems -> the transforms of preprocess/transforms.py wired and
run into a staging folder -> the dataset checked, summarized and published whole
(preprocess/output_dir.py). The command judges what needs no Beam first and imports this module
at the first check that does (preprocess/jpeg_to_tfrecord.py), because Beam takes seconds to import.

    .venv/bin/python -c "from common import beam_pipeline as b; from preprocess import pipeline as p; print(p.choose_image_threads(0, b.build_pipeline_options([])), 'image threads')"
"""
import dataclasses
import logging
import os

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from common import beam_pipeline, dataset_files
from common.user_errors import UserError
from preprocess import output_dir, progress, shards, sources, splits, summary, transforms
# Named here for the command, which checks its leftover flags with it and imports Beam through
# this module alone (preprocess/jpeg_to_tfrecord.py import_pipeline).
from common.beam_pipeline import check_pipeline_args  # noqa: F401  leftover flags: Beam's?

_LOGGER = logging.getLogger(progress.LOGGER_NAME)


@dataclasses.dataclass(frozen=True)
class Config:
    """What one run is asked to do: the command's flags, parsed and checked."""
    output_dir: str
    csv_inputs: tuple          # ((split or None, csv path), ...), globs expanded
    input_dir: str             # or "" when reading CSVs
    eval_fraction: float
    labels: tuple              # from --labels_file, or () = derive from the data
    num_shards: int            # 0 = choose by size
    resize: int                # 0 = keep the size
    max_pixels: int
    jpeg_quality: int
    image_threads: int         # 0 = choose by runner (choose_image_threads)
    worker_processes: int = 1  # sharing the image work; progress.UNKNOWN on a remote runner

    @property
    def splits(self):
        named = [split for split, _ in self.csv_inputs if split]
        return tuple(dict.fromkeys(named)) or (splits.TRAIN, splits.EVAL)


class InputError(UserError):
    """An --input_dir that is not there or has no files, or a --labels_file that cannot be read:
    one line naming the flag, the path and the fix."""


def match_files(pattern):
    """The sorted paths Beam's FileSystems.match finds for a glob or a gs:// path: what the
    command's --input_csv check (preprocess/jpeg_to_tfrecord.py expand_csv_inputs) judges."""
    return sorted(m.path for result in FileSystems.match([pattern]) for m in result.metadata_list)


def check_folder_has_files(root):
    if "://" in root:
        pattern = FileSystems.join(root.rstrip("/"), "**")
        found = FileSystems.match([pattern], limits=[1])[0].metadata_list
    elif not os.path.isdir(root):
        raise InputError(f"--input_dir {root}: no such folder")
    else:
        found = next(iter(sources.list_folder_files(root.rstrip("/"))), None)
    if not found:
        raise InputError(f"--input_dir {root} has no files in label folders (ROOT/<label>/<image>)")


def read_labels_file(path):
    try:
        text = shards.read_text(path)
    except OSError as err:  # Beam's BeamIOError too
        raise InputError(f"--labels_file {path}: cannot read it ({err})") from None
    return dataset_files.parse_labels(text, source=path)


def choose_image_threads(requested, options):
    """--image_threads if given; else one per core when the local runner keeps its
    workers in this one process (threads or in_memory: one shared pool then
    balances the cores), and 1 (inline) elsewhere: local worker processes, and
    remote runners, which run a worker process per core and rebalance work themselves.
    """
    if requested:
        return requested
    mode = options.view_as(DirectOptions).direct_running_mode
    if beam_pipeline.runner_name(options) == beam_pipeline.LOCAL_RUNNER and mode != "multi_processing":
        return os.cpu_count() or 1
    return 1


def choose_worker_processes(options):
    """How many worker processes share the image work, for the progress line's estimate:
    1 when the local runner works in this process, its workers in multi_processing, and
    progress.UNKNOWN on other runners."""
    if beam_pipeline.runner_name(options) != beam_pipeline.LOCAL_RUNNER:
        return progress.UNKNOWN
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        return direct.direct_num_workers or os.cpu_count() or 1
    return 1


def build_pipeline(pipeline, config):
    """Wires the transforms; returns the PCollection holding the final metadata dict."""
    if config.input_dir:
        read = pipeline | "ReadRows" >> transforms.ReadFolderRows(
            config.input_dir, config.eval_fraction)
    else:
        read = pipeline | "ReadRows" >> transforms.ReadCsvRows(
            config.csv_inputs, config.eval_fraction)
    if config.labels:
        labels = pipeline | "GivenLabels" >> beam.Create([list(config.labels)])
    else:
        labels = read["rows"] | "DeriveLabels" >> transforms.DeriveLabels()
    total = read["rows"] | "CountRows" >> transforms.CountRows()
    processed = read["rows"] | "ProcessImages" >> transforms.ProcessImages(
        labels, config.max_pixels, config.resize, config.jpeg_quality, config.image_threads,
        total, config.worker_processes)
    shard_stats = processed["records"] | "WriteShards" >> transforms.WriteShards(
        config.output_dir, labels, config.num_shards or None, config.splits)
    errors = ((read[transforms.ERRORS], processed[transforms.ERRORS])
              | "AllErrors" >> beam.Flatten())
    return ({"labels": labels, "shard_stats": shard_stats, "errors": errors,
             "rows_read": read["rows_read"]}
            | "WriteDatasetFiles" >> transforms.WriteDatasetFiles(
                config.output_dir, config.splits))


def log_local_workers(options):
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        workers = direct.direct_num_workers or os.cpu_count()
        # Say why the first seconds are quiet: each worker process imports Beam first.
        _LOGGER.info("Starting %d local worker processes (start-up takes 10-15 s)", workers)


def run_config(config, pipeline_args):
    """Runs the job of a Config and the Beam pipeline args to completion; returns the metadata
    dict it published."""
    options = beam_pipeline.build_pipeline_options(pipeline_args, [progress.LOGGER_NAME])
    config = dataclasses.replace(
        config, image_threads=choose_image_threads(config.image_threads, options),
        worker_processes=choose_worker_processes(options))
    with output_dir.hold(config.output_dir):
        output_dir.remove_leftovers(config.output_dir)
        staging = output_dir.new_staging_dir(config.output_dir)
        _LOGGER.info("Runner %s; %d image thread(s) per worker process; writing to %s "
                     "(published to %s when complete); splits %s",
                     options.view_as(StandardOptions).runner, config.image_threads, staging,
                     config.output_dir, ", ".join(config.splits))
        try:
            meta = run_and_check(dataclasses.replace(config, output_dir=staging), options)
        except BaseException:
            output_dir.discard_keeping_dead_letters(staging)
            raise
        if output_dir.publish(staging, config.output_dir):
            _LOGGER.info("Replaced the earlier dataset in %s", config.output_dir)
    return meta


def run_and_check(config, options):
    """Runs the pipeline into config.output_dir (the staging folder) and refuses a dataset
    that would be silently wrong (preprocess/summary.py); returns its metadata."""
    log_local_workers(options)
    beam_pipeline.run_to_completion(lambda pipeline: build_pipeline(pipeline, config), options)
    meta = dataset_files.parse_metadata(
        shards.read_text(FileSystems.join(config.output_dir, dataset_files.METADATA_FILE)))
    errors_path = FileSystems.join(config.output_dir, transforms.ERRORS_FILE)
    summary.check_some_rows_usable(meta, summary.describe_inputs(
        [path for _, path in config.csv_inputs], config.input_dir), errors_path)
    print(summary.format_summary(meta), flush=True)
    if not config.labels:
        summary.check_every_label_has_records(meta, errors_path)
    return meta
