"""Each JAX process its share of the records, and each batch spread over the devices.

trainer/data/input.py's input_fn is the one input pipeline of every engine (interleave,
drop_remainder, static shapes, the augmentation recipes). Here it is called once per
process (one per TPU host) with a HostContext: the TPUContext question it asks
(current_input_fn_deployment) answered from jax.process_index() and jax.process_count(),
so host i reads file shard i (or, with fewer files than hosts, record shard i) as
TPUEstimator's PER_HOST_V2 hosts do, each in batches of global batch / process count.
Each host's batch becomes its rows of one global array, split along the batch over every
device of the mesh (keras.distribution.DataParallel's: the variables replicated, the batch
sharded): jax.make_array_from_process_local_data.

    .venv-jax/bin/python -m pytest tests/trainer/jax/test_jax_data.py
"""
import jax
import keras
import numpy as np

BATCH_AXIS = "batch"


class HostContext:
    """The one TPUContext method input.py calls, answered for this JAX process."""

    def current_input_fn_deployment(self):
        """(device, invocation index, invocation count, batches per step): one per process."""
        return None, jax.process_index(), jax.process_count(), 1


def host_params(params, global_batch_size):
    """params of this process's input_fn call: its rows of each global batch, and its context."""
    count = jax.process_count()
    if global_batch_size % count:
        raise ValueError(f"batch size {global_batch_size} does not split across {count} processes")
    return dict(params, batch_size=global_batch_size // count, context=HostContext())


def make_distribution():
    """keras.distribution.DataParallel over every device of every process; set as Keras' own,
    so the variables it builds from now on are replicated over them."""
    distribution = keras.distribution.DataParallel(devices=jax.devices())
    keras.distribution.set_distribution(distribution)
    return distribution


def batch_sharding(distribution):
    """The sharding of a global batch: its first axis split over the distribution's mesh."""
    mesh = distribution.device_mesh
    jax_mesh = jax.sharding.Mesh(np.asarray(mesh.devices).reshape(mesh.shape), mesh.axis_names)
    return jax.sharding.NamedSharding(jax_mesh, jax.sharding.PartitionSpec(mesh.axis_names[0]))


def replicated(state, sharding):
    """state (a pytree of arrays) placed whole on every device of sharding's mesh: the layout the
    train step returns it in, so that the first step compiles the same program as every other."""
    return jax.device_put(state, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec()))


def to_global(sharding, host_batch):
    """A NumPy array of this process's rows -> the global jax.Array, sharded over the devices."""
    return jax.make_array_from_process_local_data(sharding, np.asarray(host_batch))


def global_batches(dataset, sharding):
    """(images, labels, weights) global arrays of each (features, labels) batch of dataset."""
    for features, labels in dataset.as_numpy_iterator():
        yield (to_global(sharding, features["image"]), to_global(sharding, labels),
               to_global(sharding, features["weight"]))


def host_rows(array, count):
    """NumPy [<= count, ...]: the first count rows of a global batch that this process holds
    (its devices' shards, in row order); a few rows to look at, not the whole batch."""
    shards = sorted(array.addressable_shards, key=lambda shard: shard.index[0].start or 0)
    rows, held = [], 0
    for shard in shards:
        rows.append(np.asarray(shard.data))
        held += len(rows[-1])
        if held >= count:
            break
    return np.concatenate(rows)[:count]
