"""The data a run reads, checked before it writes anything; data errors named by their file.

Before training: the eval split holds exactly the records metadata.json counts
(a count of records, no decoding: the eval split is the small one, and a short
one would otherwise fail only at the first evaluation, steps later), the train
glob matches the shards metadata.json lists, and the first SAMPLE_RECORDS records
of every shard the run reads hold an image the serving decoder reads, at the size
the record states (records from another tool may hold PNGs, which train, or anything
else, which is refused naming the shard and the record). During the run: TensorFlow's
DataLossError for a truncated or corrupt TFRecord names an offset but no file, so the
files are read once more to find it; a check of the input pipeline (trainer/data/input.py,
DATA_ERROR_MARK: a label id, a record holding no image) becomes its own message; an
image that fails to decode names the globs and the command below, which finds it.

    .venv/bin/python -m trainer.data.data_checks 'DATA/eval-*'            # count records, naming a bad shard
    .venv/bin/python -m trainer.data.data_checks 'DATA/eval-*' --decode   # and decode every image
"""
import sys

import tensorflow as tf

from common import image_ops, record_schema
from common.dataset_files import DatasetError
from trainer.data import byo_records, dataset_info, input as input_lib
from trainer.settings import table

RERUN = "re-run preprocessing (into a fresh output directory) and train again"
RECOUNT = "correct --num_eval_examples, or leave it unset to count them"
# Records decoded at the start of every shard before a run: a tool writes one format
# throughout, so a wrong one shows in each shard's first records. A few per shard keep the
# check to seconds for ImageNet's 1,152 shards; a bad record deeper in is named mid-run.
SAMPLE_RECORDS = 3
# Words of the errors TensorFlow's image decoders raise for bytes they cannot decode.
DECODE_ERRORS = ("DecodeAndCropJpeg", "DecodeImage", "Invalid JPEG data", "Invalid PNG data",
                 "Unknown image file format")


def check_before_run(params):
    """DatasetError naming the first file or count that does not match metadata.json
    (or, for records without one, --num_eval_examples / OUT/record_counts.json). Each glob
    is listed once and judged once: this project's dataset, or your own records."""
    keys = split_paths(params)
    files = {"eval_data_path": input_lib.list_files(params["eval_data_path"])} if "eval_data_path" in keys else {}
    own = {key: not byo_records.has_dataset_files(params[key]) for key in keys}  # your own records (byo_records.py)
    if "eval_data_path" in keys:
        pattern = params["eval_data_path"]
        # Your own records counted into OUT/record_counts.json at their current size need no recount.
        found = (byo_records.cached_records(files["eval_data_path"], params["output_dir"])
                 if own["eval_data_path"] else None)
        if found is None:
            found = input_lib.count_records(files["eval_data_path"])
        if found != params["num_eval_examples"]:
            raise DatasetError(f"eval_data_path={pattern!r} holds {found} records, but "
                               f"{count_source(own['eval_data_path'])} counts "
                               f"{params['num_eval_examples']}: {fix_for_count(own['eval_data_path'])}")
    if "train_data_path" in keys:
        files["train_data_path"] = input_lib.list_files(params["train_data_path"])
        if not own["train_data_path"]:
            check_shard_count(params["train_data_path"], len(files["train_data_path"]))
    for key in keys:
        check_images(files[key], SAMPLE_RECORDS)


def split_paths(params):
    """The params keys of the record globs params["mode"] reads."""
    reads = table.mode_reads(params)
    return [key for key, read in (("train_data_path", reads.trains), ("eval_data_path", reads.evaluates))
            if read]


def check_images(files, limit):
    """DatasetError naming the first of the first limit records (-1: all) of each file whose
    image the serving decoder does not read, or not at the size the record states."""
    for record, path, index in read_records(files, limit):
        problem = image_problem(record.numpy())
        if problem:
            raise DatasetError(f"record {int(index)} of {path.numpy().decode()}{problem}")


def read_records(files, limit):
    """(record, path, index) of the first limit records of each file, in file order; the files
    are opened in parallel (on cloud storage each open takes tens of ms, and ImageNet has
    over a thousand shards)."""
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda path: input_lib.read_with_sources(path).take(limit),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def image_problem(record):
    """What is wrong with one serialized record's image, as the end of a line that starts
    "record N of PATH"; None when the serving decoder reads it at its stated size."""
    try:
        example = record_schema.decode_example_proto(record)
    except Exception:  # noqa: BLE001  protobuf's DecodeError, whose module differs by protobuf build
        return f" is not a tf.train.Example: {input_lib.REWRITE}"
    image_bytes = example.get(record_schema.ENCODED)
    if not isinstance(image_bytes, bytes) or not image_ops.is_decodable_format(image_bytes):
        return input_lib.NOT_AN_IMAGE
    try:
        height, width, _ = image_ops.decode_image(image_bytes).shape
    except tf.errors.InvalidArgumentError as err:
        return f": its image does not decode ({input_lib.first_line(err.message)}); {input_lib.REWRITE}"
    stated = example.get(record_schema.HEIGHT, 0), example.get(record_schema.WIDTH, 0)
    if all(stated) and stated != (height, width):
        return (f" states {record_schema.HEIGHT}/{record_schema.WIDTH} {stated[0]}x{stated[1]}, "
                f"but its image is {height}x{width}: {input_lib.REWRITE}")
    return None


def fix_for_count(is_own_records):
    """What to do about a wrong eval count: the count was given by flag, or the data changed."""
    if is_own_records:
        return RECOUNT
    return f"the files changed since preprocessing; {RERUN}"


def count_source(is_own_records):
    """Where the expected eval count came from."""
    return (f"--num_eval_examples (or {byo_records.CACHE_FILE})" if is_own_records
            else "metadata.json beside it")


def check_shard_count(pattern, found):
    """The glob must match every shard of its split, as metadata.json lists them (found: the
    number of files it matches)."""
    _, dataset_metadata = dataset_info.read_dataset_info(pattern)
    split = dataset_info.split_of(pattern, dataset_metadata)
    expected = dataset_metadata["splits"][split]["shards"]
    if found != expected:
        raise DatasetError(f"train_data_path={pattern!r} matches {found} files, but metadata.json "
                           f"lists {expected} {split} shards: a shard is missing or extra; {RERUN}")


def explain(err, params):
    """A DatasetError for a data error raised during the run, or None if it is not one."""
    if input_lib.DATA_ERROR_MARK in err.message:
        text = err.message[err.message.index(input_lib.DATA_ERROR_MARK):]
        return DatasetError(text.split("]")[0].removeprefix(input_lib.DATA_ERROR_MARK).strip())
    if isinstance(err, tf.errors.InvalidArgumentError) and any(
            words in err.message for words in DECODE_ERRORS):
        # The decode op names no record; decoding every image to find it could take hours.
        patterns = " or ".join(repr(params[key]) for key in split_paths(params))
        return DatasetError(
            f"a record of {patterns} holds an image that does not decode "
            f"({input_lib.first_line(err.message)}): find it with python -m "
            f"trainer.data.data_checks PATTERN --decode, then {input_lib.REWRITE}")
    if isinstance(err, tf.errors.DataLossError):
        for key in ("train_data_path", "eval_data_path"):
            if params.get(key):
                try:
                    input_lib.count_records(input_lib.list_files(params[key]))
                except DatasetError as named:
                    return named
    return None


def main(argv):
    files = input_lib.list_files(argv[1])
    print(input_lib.count_records(files), "records")
    if "--decode" in argv[2:]:
        try:
            check_images(files, -1)
        except DatasetError as err:
            print(f"error: {err}")
            return 2
        print("every image decodes at its stated size")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
