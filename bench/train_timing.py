"""What the training benchmarks share: their datasets, the cached input and the Keras engine's timed train function.

bench/bench_train.py (the Keras engine against the Estimator's, .venv) and
bench/bench_jax_train.py (the JAX engine against the Keras engine, .venv-jax) time
the Keras engine the same way, on the same cached batches.

    .venv/bin/python -m bench.bench_train --quick
"""
import os
import time

import tensorflow as tf

from bench.bench_input import SHARDS, write_records
from common import dataset_files
from trainer.data import input as input_lib
from trainer.keras import model as keras_model, train as keras_train
from trainer.run import training_log

CACHED_BATCHES = 16     # distinct batches both sides cycle through
# Excluded from the rate: graph building, the first step's allocations, and the first pass over
# the cached batches, which decodes their JPEGs (timing from step 5 counted 11 batches of decoding).
WARMUP_STEPS = CACHED_BATCHES


def write_splits(directory, splits, labels):
    """{split: [(jpeg, label id)]} as TFRecords, with labels.txt and metadata.json beside them."""
    os.makedirs(directory, exist_ok=True)
    for split, examples in splits.items():
        write_records(directory, split, examples)
    counts = {split: {"records": len(examples), "shards": SHARDS,
                      "per_label": {label: sum(1 for _, i in examples if labels[i] == label)
                                    for label in labels}}
              for split, examples in splits.items()}
    total = sum(len(examples) for examples in splits.values())
    with open(f"{directory}/{dataset_files.LABELS_FILE}", "w") as f:
        f.write(dataset_files.labels_to_text(labels))
    with open(f"{directory}/{dataset_files.METADATA_FILE}", "w") as f:
        f.write(dataset_files.metadata_to_json(dataset_files.build_metadata(labels, counts, {}, total)))


def make_cached_input_fn(pattern):
    """The TRAIN input_fn with its first CACHED_BATCHES batches cached and repeated."""
    train_input_fn = input_lib.make_input_fn(pattern, input_lib.TRAIN)

    def input_fn(params):
        return train_input_fn(params).take(CACHED_BATCHES).cache().repeat()
    return input_fn


def run_keras(params, input_fn, steps):
    """(steps per wall second, CPU seconds per step) of the Keras engine's train function
    (iterations_per_loop steps per call), timed after a warm-up call that traces it and fills
    the cache."""
    strategy = tf.distribute.get_strategy()
    model = keras_model.build_training_model(params, strategy)
    dataset = input_fn(dict(params, batch_size=params["train_batch_size"]))
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    train_function = keras_train.make_train_function(model, strategy)
    float(train_function(iterator, tf.constant(WARMUP_STEPS, tf.int64))["loss"])
    wall, cpu = time.perf_counter(), time.process_time()
    for count in training_log.plan_executions(0, steps, dict(params, save_checkpoints_steps=steps)):
        logs = train_function(iterator, tf.constant(count, tf.int64))
    float(logs["loss"])  # waits for the last step
    return steps / (time.perf_counter() - wall), (time.process_time() - cpu) / steps
