"""The input pipeline: make_input_fn(file_pattern, mode, seed=...) -> input_fn(params) -> tf.data.Dataset.

    python -m trainer.data.input 'DATA/train-*' train '{"batch_size": 16, "image_size": 64, ...}'
                                                 # print one batch's shapes and labels

input_fn yields (features, labels), every shape static:
  features["image"]   float32 [B, S, S, 3], or [S, S, 3, B] if transpose_input;
                      bfloat16 if use_bfloat16. Values in [-1, 1] (image_ops).
  features["weight"]  float32 [B]: 1.0 for a real example, 0.0 for eval padding.
  labels              int32 [B], 0-based (common/record_schema.py); in training with mixup or
                      CutMix on, float32 [B, C] label shares, each row summing to 1 (mix.py).
B is params["batch_size"]: the per-replica batch, which TPUEstimator (PER_HOST_V2) and the
Keras engine (trainer/keras/input_context.py) both pass; one replica's is the global batch.

params keys read here (defaults live in trainer/settings/table.py, nowhere else):
  num_classes      int: from labels.txt (or --num_classes); every label is checked to be below it.
  label_offset     int: subtracted from each record's image/class/label (1 for tensorflow/tpu's
                   1-based ImageNet records, trainer/data/byo_records.py); 0 for this project's.
  batch_size       set by TPUEstimator or the Keras engine: examples per batch this input_fn yields.
  context          set by TPUEstimator on TPU only (a TPUContext), and by the Keras engine (its
                   PipelineContext); the dataset is sharded across input_fn invocations
                   (one per host) when it has several.
  image_size       int: side S of the square model input, in pixels.
  min_crop_area    float in (0, 1]: the training crop covers at least this
                   fraction of the image area (1.0 = no crop on square images).
  random_flip      bool: mirror training images left-right at random.
  shuffle_buffer   int: examples in the training shuffle buffer.
  transpose_input  bool: emit images batch-last [S, S, 3, B] (faster TPU infeed);
                   model_fn transposes them back with tf.transpose(x, [3, 0, 1, 2]).
  use_bfloat16     bool: cast images to bfloat16 (TPU only).
  cache_dataset    bool: cache the serialized records in memory after the first pass.
  augment, randaugment_num_ops, randaugment_magnitude, random_erasing, mixup_alpha,
  cutmix_alpha, mixup_switch_prob: the training augmentation (augment.py, mix.py);
                   the table's defaults (all off) where params lack them.
The training stream's seed is an argument, not a params key: each engine derives it from
--seed and the step the stream starts at (train_seed).
"""
import hashlib
import json
import math
import posixpath
import sys

import tensorflow as tf

from common import dataset_files, image_ops, record_schema
from trainer.data import augment, mix
from trainer.settings import checks

# The modes input_fn serves: the values of tf.estimator.ModeKeys, which the Estimator engine
# passes, as plain strings, so that this module runs where tf.estimator does not exist.
TRAIN, EVAL, PREDICT = "train", "eval", "infer"
AUTOTUNE = tf.data.AUTOTUNE
# Images of a training batch decoded at once (tf.map_fn's parallel_iterations); any value
# from 4 to 64 measured alike (docs/benchmarks.md, "Measured figures behind choices in the code").
DECODE_PARALLELISM = 16
# Starts the message of a data check that fails inside the graph: the loop turns an
# error carrying it into one line naming the files (trainer/run/driver.py, run).
DATA_ERROR_MARK = "DATA ERROR:"
# The fix for one bad record, and the end of the line naming a record that holds no image
# ("record INDEX of PATH" + NOT_AN_IMAGE), in-graph (checked_image_bytes) and before a run
# (trainer/data/data_checks.py).
REWRITE = "rewrite or remove that record, then run the same command again"
NOT_AN_IMAGE = (f" holds no image the serving decoder reads (its {record_schema.ENCODED} is not "
                f"{', '.join(image_ops.image_formats())}): {REWRITE}")


def list_files(file_pattern):
    """Sorted files matching file_pattern; ValueError naming the pattern if none do."""
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise ValueError(f"file_pattern={file_pattern!r} matches no files")
    return files


def count_records(files):
    """Number of records in TFRecord files (one sequential read, no decoding);
    DatasetError naming a truncated or corrupt file.

    A Python iterator rather than tf.data, so it also works when called in graph mode.
    """
    total = 0
    for path in files:
        try:
            total += sum(1 for _ in tf.compat.v1.io.tf_record_iterator(path))
        except tf.errors.DataLossError as err:
            raise dataset_files.DatasetError(
                f"{path}: truncated or corrupt TFRecord ({first_line(err.message)}); "
                f"re-run preprocessing into a fresh output directory") from None
    return total


def first_line(message):
    return message.strip().splitlines()[0] if message.strip() else "no message"


# The settings input_fn reads; their rules are the table's (trainer/settings/table.py).
INPUT_SETTINGS = ("image_size", "num_classes", "min_crop_area", "shuffle_buffer")
AUGMENT_SETTINGS = ("augment", "randaugment_num_ops", "randaugment_magnitude", "random_erasing",
                    "mixup_alpha", "cutmix_alpha", "mixup_switch_prob")


def validate_params(params):
    """Rejects bad input params by name, before any graph is built: the table's rule for each
    setting read here (params may be hand-built, e.g. by bench/), and TPUEstimator's batch_size."""
    if int(params["batch_size"]) <= 0:
        raise ValueError(f"batch_size={params['batch_size']} must be a positive integer")
    if int(params["num_classes"]) <= 0:
        raise ValueError(f"num_classes={params['num_classes']}: the class count is not known yet")
    for key in INPUT_SETTINGS + AUGMENT_SETTINGS:
        value = augment.setting(params, key)
        problem = checks.value_problem(key, value)
        if problem:
            raise ValueError(f"{key}={value!r} {problem}")


def input_shard(params):
    """(num_shards, shard_index) of this input_fn invocation; (1, 0) off TPU.

    TF 2.15's TPUContext has no current_input_fidelity; current_input_fn_deployment()
    returns (device, invocation_index, total_invocation_count, replicas_consumed),
    which is right for every deployment (PER_HOST_V1/V2: one invocation per host).
    """
    context = params.get("context")
    if context is None:
        return 1, 0
    _, index, count, _ = context.current_input_fn_deployment()
    return count, index


def batches_per_step(params):
    """Batches one input_fn invocation feeds per TPU step (replicas per host on PER_HOST_V2)."""
    context = params.get("context")
    if context is None:
        return 1
    return context.current_input_fn_deployment()[3]


def padded_shard_size(num_examples, num_shards, step_examples):
    """Examples every shard yields after padding: the largest shard rounded up to whole steps.

    All shards must run the same number of steps, so each pads to the same size.
    """
    largest = math.ceil(num_examples / num_shards)
    return math.ceil(largest / step_examples) * step_examples


def eval_steps(num_examples, global_batch_size):
    """Eval steps that cover every example once: ceil(N / global batch).

    Equals padded_shard_size(N, shards, per-shard step examples) / per-shard
    step examples, since ceil(ceil(N/k)/m) == ceil(N/(k*m)).
    """
    return math.ceil(num_examples / global_batch_size)


def finalize_batch(params):
    """Casts and lays out a batch for the TPU: bfloat16 and batch-last are optional."""
    def finalize(batch_features, labels):
        image = batch_features["image"]
        if params["use_bfloat16"]:
            image = tf.cast(image, tf.bfloat16)
        if params["transpose_input"]:
            image = tf.transpose(image, [1, 2, 3, 0])  # [S, S, 3, B]
        return dict(batch_features, image=image), labels
    return finalize


def train_seed(seed, start_step, stream=0):
    """The seed of a training stream that starts at start_step, for a run with --seed seed;
    None for an unseeded run (seed 0): a new random stream each time.

    A stream starts again at every Estimator round (each train call builds a new graph
    and input) and when a run resumes. Derived from the step, each start draws a new
    order and new crops, which the same seed gives again, instead of replaying the
    first round's. stream: another trainer reading at the same time (a
    parameter-server worker), so that no two read in the same order.
    """
    return derive_seed(seed, start_step, stream) if seed else None


def derive_seed(*parts):
    """A seed in [0, 2**62) made from parts: the same parts give the same seed, any other
    parts an unrelated one (a hash, not a sum: seed 1 at step 1 is not seed 2 at step 0)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 2


def part_seed(seed, *parts):
    """The seed of one random op of a stream (None stays None: unseeded)."""
    return None if seed is None else derive_seed(seed, *parts)


def as_graph_code(function):
    """function as tf.data traces it, without AutoGraph's rewrite of its Python: the input
    pipeline's control flow is TensorFlow's own ops (tf.cond, tf.where), and the rewrite cost a
    process 2.5-3 s of CPU the first time it built its datasets (0.5 s without)."""
    return tf.autograph.experimental.do_not_convert(function)


def read_with_sources(path):
    """(serialized record, path, int64 index in the file) of each record of one TFRecord file:
    a record that holds no image is then named by its file and index (checked_image_bytes).

    Zipped and enumerated, not mapped: no function call per record, which in tf.data costs
    about as much as decoding a small JPEG.
    """
    records = tf.data.TFRecordDataset(path)
    return tf.data.Dataset.zip((records, tf.data.Dataset.from_tensors(path).repeat(),
                                tf.data.Dataset.range(tf.int64.max)))


def read_train_records(files, params, seed=None):
    """This host's (record, path, index) triples (read_with_sources): shuffled file order,
    parallel reads, shuffled, endless.

    seed: train_seed's, or None. Seeded, the reads keep their order (deterministic),
    so the same seed gives the same stream.
    """
    num_shards, shard_index = input_shard(params)
    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_files = len(files) >= num_shards
    if shard_files:  # each host reads its own files; shard before shuffling.
        dataset = dataset.shard(num_shards, shard_index)
    dataset = dataset.shuffle(len(files), seed=part_seed(seed, shard_index, "files"),
                              reshuffle_each_iteration=True)
    dataset = dataset.interleave(
        as_graph_code(read_with_sources), num_parallel_calls=AUTOTUNE, deterministic=seed is not None)
    if not shard_files:
        dataset = dataset.shard(num_shards, shard_index)
    if params["cache_dataset"]:
        dataset = dataset.cache()
    # First shuffle and then repeat, so each epoch is a new permutation and no
    # example repeats before every other one has been seen once.
    dataset = dataset.shuffle(int(params["shuffle_buffer"]), seed=part_seed(seed, shard_index, "records"),
                              reshuffle_each_iteration=True)
    return dataset.repeat()


def make_train_dataset(files, params, file_pattern="", seed=None):
    """Shuffled, repeated, augmented batches of params["batch_size"].

    Everything runs per batch, in one parallel map: parse, check that each record holds
    an image (checked_image_bytes), draw crop windows, decode each image's window and
    resize (image_ops.decode_crop_and_resize_batch, DECODE_PARALLELISM images at a time),
    flip, normalize. In tf.data each per-image step costs about as
    much as decoding a 32x32 JPEG, so a per-image map (and the unbatch and
    re-batch around it) is what bench/bench_input.py measured as the cost.
    drop_remainder=True: the TPU compiles for one static batch shape, and the
    stream is endless. seed: train_seed's, or None (unseeded).
    """
    dataset = read_train_records(files, params, seed)
    dataset = dataset.batch(int(params["batch_size"]), drop_remainder=True)
    # Each batch carries its own int64 [2] seed for the stateless random ops of its
    # augmentation: a parallel map then draws the same crops for the same batch
    # whichever call runs first. Unseeded, these seeds are random.
    augment_seeds = tf.data.Dataset.random(seed=part_seed(seed, input_shard(params)[1], "augment"))
    dataset = tf.data.Dataset.zip((dataset, augment_seeds.batch(2)))
    return dataset.map(as_graph_code(_make_train_batch_fn(params, file_pattern)),
                       num_parallel_calls=AUTOTUNE, deterministic=seed is not None)


def _make_train_batch_fn(params, file_pattern):
    """[B] (record, path, index) triples -> ({"image": [B, S, S, 3], "weight": [B]}, labels):
    int32 [B], or float32 [B, C] shares when mixup/CutMix mix them (trainer/data/mix.py)."""
    image_size = int(params["image_size"])

    def train_batch(sources, seed):
        records, paths, indices = sources
        crop_seed, flip_seed = image_ops.stateless_seeds(seed, 2)
        parsed = record_schema.parse_example_batch(records)
        image_bytes = checked_image_bytes(parsed[record_schema.ENCODED], paths, indices)
        # The schema stores each image's size, so windows need no JPEG header read.
        heights, widths = parsed[record_schema.HEIGHT], parsed[record_schema.WIDTH]
        check = tf.debugging.assert_positive(
            tf.minimum(heights, widths),
            message=f"records without {record_schema.HEIGHT}/{record_schema.WIDTH}: rebuild the TFRecords")
        with tf.control_dependencies([check]):
            windows = image_ops.sample_crop_windows(heights, widths, float(params["min_crop_area"]),
                                                    crop_seed)
        images = image_ops.decode_crop_and_resize_batch(image_bytes, windows, image_size,
                                                        DECODE_PARALLELISM)
        # The augmentation's own seeds, folded from the batch's: crops and flips stay as without it.
        policy_seed, erase_seed, mix_seed = image_ops.stateless_seeds(
            tf.random.experimental.stateless_fold_in(seed, 1), 3)
        images = augment.apply_policy(images, params, policy_seed, DECODE_PARALLELISM)
        images = image_ops.flip_and_normalize_batch(images, bool(params["random_flip"]), flip_seed)
        images = augment.erase(images, float(augment.setting(params, "random_erasing")), erase_seed)
        labels = checked_labels(parsed[record_schema.LABEL], params, file_pattern)
        weights = tf.ones_like(labels, tf.float32)
        images, labels = mix.mix_batch(images, labels, params, mix_seed)
        return {"image": images, "weight": weights}, labels
    return train_batch


def checked_image_bytes(image_bytes, paths, indices):
    """image_bytes (tf.string [b]), checked to hold images in a format the serving decoder
    reads (common/image_ops.py); a failed check names the first bad record's file and index.

    Without it, junk bytes (or a format decode_image does not read) fail inside a decode op
    with "Unknown image file format", naming no file. Vectorized: a few ops per batch.
    """
    is_image = image_ops.is_decodable_format(image_bytes)
    first_bad = tf.argmin(tf.cast(is_image, tf.int32))
    message = tf.strings.join([f"{DATA_ERROR_MARK} record ", tf.strings.as_string(indices[first_bad]),
                               " of ", paths[first_bad], NOT_AN_IMAGE])
    with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(is_image), [message])]):
        return tf.identity(image_bytes)


def checked_labels(label_ids, params, file_pattern):
    """int32 0-based labels (label_offset subtracted), checked to be class ids; a failed
    check names the files.

    Records and labels.txt from two different preprocessing runs would otherwise fail
    deep inside the loss op (or, on TPU, train on garbage). Runs on the host (input_fn).
    """
    # Absent only from hand-built params: table.DEFAULTS has it (0).
    offset = int(params.get("label_offset", 0))
    labels = tf.cast(label_ids, tf.int32) - offset
    message = label_error(params, file_pattern)
    checks = [tf.debugging.assert_non_negative(labels, message=message),
              tf.debugging.assert_less(labels, int(params["num_classes"]), message=message)]
    with tf.control_dependencies(checks):
        return tf.identity(labels)


def label_error(params, file_pattern):
    """The message of a failed label check: which ids were expected, and whence."""
    num_classes, offset = params["num_classes"], int(params.get("label_offset", 0))
    if not offset:
        return (f"{DATA_ERROR_MARK} a record of {file_pattern} has a label id outside "
                f"[0, {num_classes}), the ids of {labels_file_of(file_pattern)}: the "
                f"records and labels.txt come from different preprocessing runs")
    return (f"{DATA_ERROR_MARK} a record of {file_pattern} has a label id outside "
            f"[{offset}, {offset + num_classes}) (label_offset={offset}, num_classes="
            f"{num_classes}): check --label_offset and --num_classes")


def labels_file_of(file_pattern):
    return posixpath.join(dataset_files.dataset_dir_of(file_pattern), dataset_files.LABELS_FILE)


def make_eval_dataset(files, num_examples, params, file_pattern=""):
    """One deterministic pass in batches, padded with zero-weight examples to whole steps.

    Like training, the image work runs per batch (parse, tf.map_fn of the
    evaluation preprocessing); the last real batch is topped up with
    zero-weight images and whole zero-weight batches follow, so every real
    example is seen exactly once and every batch has the static size.
    """
    num_shards, shard_index = input_shard(params)
    batch_size = int(params["batch_size"])
    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
        as_graph_code(read_with_sources), num_parallel_calls=AUTOTUNE, deterministic=True)
    # Shard records, not files: shard sizes are then known exactly from N.
    dataset = dataset.shard(num_shards, shard_index)
    shard_examples = len(range(shard_index, num_examples, num_shards))
    # Fails the pass if metadata's count is stale, instead of mis-padding.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(shard_examples))
    if params["cache_dataset"]:
        dataset = dataset.cache()
    dataset = dataset.batch(batch_size).map(
        as_graph_code(_make_eval_batch_fn(params, file_pattern)), num_parallel_calls=AUTOTUNE,
        deterministic=True)
    step_examples = batch_size * batches_per_step(params)
    padding_batches = (padded_shard_size(num_examples, num_shards, step_examples) // batch_size
                       - math.ceil(shard_examples / batch_size))
    return dataset.concatenate(tf.data.Dataset.from_tensors(
        _pad_batch_to(_empty_batch(params), batch_size)).repeat(padding_batches))


def _make_eval_batch_fn(params, file_pattern):
    """[b <= B] (record, path, index) triples -> a batch of B: the b real ones, then zero-weight
    padding."""
    image_size, batch_size = int(params["image_size"]), int(params["batch_size"])

    def eval_batch(records, paths, indices):
        parsed = record_schema.parse_example_batch(records)
        image_bytes = checked_image_bytes(parsed[record_schema.ENCODED], paths, indices)
        images = image_ops.preprocess_batch_for_eval(
            image_bytes, image_size, parallel_iterations=DECODE_PARALLELISM)
        labels = checked_labels(parsed[record_schema.LABEL], params, file_pattern)
        batch = ({"image": images, "weight": tf.ones_like(labels, tf.float32)}, labels)
        return _pad_batch_to(batch, batch_size)
    return eval_batch


def _empty_batch(params):
    """A batch of no examples, in the eval batch's structure."""
    image_size = int(params["image_size"])
    return ({"image": tf.zeros([0, image_size, image_size, 3], tf.float32),
             "weight": tf.zeros([0], tf.float32)}, tf.zeros([0], tf.int32))


def _pad_batch_to(batch, batch_size):
    """Appends zero rows (weight 0: they count in no metric) up to batch_size; static shapes."""
    batch_features, labels = batch
    missing = batch_size - tf.shape(labels)[0]

    def pad(tensor):
        padded = tf.pad(tensor, [[0, missing]] + [[0, 0]] * (tensor.shape.rank - 1))
        padded.set_shape([batch_size] + tensor.shape.as_list()[1:])
        return padded
    return {key: pad(value) for key, value in batch_features.items()}, pad(labels)


def make_input_fn(file_pattern, mode, num_examples=None, seed=None):
    """Returns input_fn(params) -> tf.data.Dataset of (features, labels) for mode.

    file_pattern: a glob of TFRecord files (common/record_schema.py schema).
    mode: TRAIN, EVAL or PREDICT (tf.estimator.ModeKeys' values); EVAL and PREDICT share
      the eval path.
    num_examples: records matching file_pattern (metadata.json's split size);
      EVAL counts the records itself when it is None.
    seed: TRAIN's stream seed (train_seed), or None for an unseeded stream; EVAL and
      PREDICT are deterministic without one.
    """
    files = list_files(file_pattern)
    is_training = mode == TRAIN
    if not is_training and num_examples is None:
        num_examples = count_records(files)

    def input_fn(params):
        validate_params(params)
        if is_training:
            dataset = make_train_dataset(files, params, file_pattern, seed)
        else:
            dataset = make_eval_dataset(files, int(num_examples), params, file_pattern)
        if params["use_bfloat16"] or params["transpose_input"]:
            dataset = dataset.map(as_graph_code(finalize_batch(params)), num_parallel_calls=AUTOTUNE)
        return dataset.prefetch(AUTOTUNE)
    return input_fn


def main(argv):
    file_pattern, mode, params = argv[1], argv[2], json.loads(argv[3])
    for batch_features, labels in make_input_fn(file_pattern, mode)(params).take(1):
        print({k: (v.shape, v.dtype.name) for k, v in batch_features.items()},
              "labels", labels.numpy())


if __name__ == "__main__":
    main(sys.argv)
