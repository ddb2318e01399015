"""The data a run reads, checked before it writes anything; data errors named by their file.

Before training: the eval split holds exactly the records metadata.json counts
(a count of records, no decoding: the eval split is the small one, and a short
one would otherwise fail only at the first evaluation, steps later), and the
train glob matches the shards metadata.json lists. During the run: TensorFlow's
DataLossError for a truncated or corrupt TFRecord names an offset but no file,
so the files are read once more to find it; a label-id check of the input
pipeline (trainer/data/input.py, DATA_ERROR_MARK) becomes its own message.

    .venv/bin/python -m trainer.data.data_checks 'DATA/eval-*'    # count records, naming a bad shard
"""
import sys

import tensorflow as tf

from common.dataset_files import DatasetError
from trainer.data import byo_records, dataset_info, input as input_lib
from trainer.settings import table

RERUN = "re-run preprocessing (into a fresh output directory) and train again"
RECOUNT = "correct --num_eval_examples, or leave it unset to count them"


def check_before_run(params):
    """DatasetError naming the first file or count that does not match metadata.json
    (or, for records without one, --num_eval_examples / OUT/record_counts.json)."""
    if params["mode"] in table.EVAL_MODES:
        pattern = params["eval_data_path"]
        files = input_lib.list_files(pattern)
        # Your own records counted into OUT/record_counts.json at their current size need no recount.
        found = byo_records.cached_records(files, params["output_dir"]) if is_own(pattern) else None
        if found is None:
            found = input_lib.count_records(files)
        if found != params["num_eval_examples"]:
            raise DatasetError(f"eval_data_path={pattern!r} holds {found} records, but "
                               f"{count_source(pattern)} counts {params['num_eval_examples']}: "
                               f"{fix_for_count(pattern)}")
    if params["mode"] in table.TRAIN_MODES and not is_own(params["train_data_path"]):
        check_shard_count(params["train_data_path"])


def is_own(pattern):
    """True for records without labels.txt/metadata.json (trainer/data/byo_records.py)."""
    return not byo_records.has_dataset_files(pattern)


def fix_for_count(pattern):
    """What to do about a wrong eval count: the count was given by flag, or the data changed."""
    if is_own(pattern):
        return RECOUNT
    return f"the files changed since preprocessing; {RERUN}"


def count_source(pattern):
    """Where the expected eval count came from."""
    return (f"--num_eval_examples (or {byo_records.CACHE_FILE})" if is_own(pattern)
            else "metadata.json beside it")


def check_shard_count(pattern):
    """The glob must match every shard of its split, as metadata.json lists them."""
    _, dataset_metadata = dataset_info.read_dataset_info(pattern)
    split = dataset_info.split_of(pattern, dataset_metadata)
    expected = dataset_metadata["splits"][split]["shards"]
    found = len(input_lib.list_files(pattern))
    if found != expected:
        raise DatasetError(f"train_data_path={pattern!r} matches {found} files, but metadata.json "
                           f"lists {expected} {split} shards: a shard is missing or extra; {RERUN}")


def explain(err, params):
    """A DatasetError for a data error raised during the run, or None if it is not one."""
    if input_lib.DATA_ERROR_MARK in err.message:
        text = err.message[err.message.index(input_lib.DATA_ERROR_MARK):]
        return DatasetError(text.split("]")[0].removeprefix(input_lib.DATA_ERROR_MARK).strip())
    if isinstance(err, tf.errors.DataLossError):
        for key in ("train_data_path", "eval_data_path"):
            if params.get(key):
                try:
                    input_lib.count_records(input_lib.list_files(params[key]))
                except DatasetError as named:
                    return named
    return None


def main(argv):
    print(input_lib.count_records(input_lib.list_files(argv[1])), "records")


if __name__ == "__main__":
    main(sys.argv)
