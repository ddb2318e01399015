"""One of two JAX processes on this machine (trainer/jax/processes.py's variables name them): what
its share of the input is. Prints one JSON line: the train files it read, its eval steps and
rows, the global batch it saw, and whether the rows it shows TensorBoard are its own first ones.

    JAX_COORDINATOR_ADDRESS=localhost:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
        .venv-jax/bin/python -m tests.trainer.jax.two_hosts DATA
"""
import json
import sys

import numpy as np


def main(data):
    from trainer.jax import data as data_lib, processes
    processes.join_processes(use_tpu=False)
    import jax
    from jax.experimental import multihost_utils
    from trainer.data import input as input_lib
    from trainer.settings import table
    params = dict(table.DEFAULTS, image_size=16, num_classes=3, shuffle_buffer=16)
    host = data_lib.host_params(params, 8)
    files = input_lib.list_files(f"{data}/train-*")
    read = {path.decode() for _, path, _ in input_lib.read_train_records(files, host).take(24).as_numpy_iterator()}
    sharding = data_lib.batch_sharding(data_lib.make_distribution())
    eval_dataset = input_lib.make_input_fn(f"{data}/eval-*", input_lib.EVAL)(data_lib.host_params(params, 8))
    steps, rows, shapes = 0, 0.0, set()
    first_host_batch = next(eval_dataset.as_numpy_iterator())[0]["image"]
    for images, _, weights in data_lib.global_batches(eval_dataset, sharding):
        if not steps:  # the rows TensorBoard's input images take: this host's own, first first
            shown_own_rows = bool(np.array_equal(data_lib.host_rows(images, 3), first_host_batch[:3]))
        steps += 1
        shapes.add(tuple(images.shape))
        rows += float(np.sum(multihost_utils.process_allgather(weights, tiled=True)))
    print(json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                      "devices": jax.device_count(), "train_files": sorted(read), "eval_steps": steps,
                      "eval_rows": rows, "global_shapes": sorted(shapes), "host_batch": host["batch_size"],
                      "shown_own_rows": shown_own_rows}))


if __name__ == "__main__":
    main(sys.argv[1])
