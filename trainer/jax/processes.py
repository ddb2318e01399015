"""The JAX processes of a run: one per host, joined by jax.distributed before any computation.

On a Cloud TPU (--use_tpu: a TPU VM, every host of a slice started with `--worker=all`,
or a GKE TPU node pool) JAX finds the other hosts itself: jax.distributed.initialize()
with no arguments. Anywhere else several processes name each other through JAX's own
variables, JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and
JAX_PROCESS_ID; on CPU they then talk through gloo (tests/trainer/jax/test_jax_data.py
runs two on one machine). Without either, one process: nothing to join.

    JAX_COORDINATOR_ADDRESS=localhost:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
        .venv-jax/bin/python -m tests.trainer.jax.two_hosts DATA
"""
import os

import jax

from common.user_errors import UserError

PROCESS_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


class ProcessesError(UserError):
    """The process variables are incomplete or not numbers: one line, exit 2."""


def named_processes():
    """(coordinator address, process count, this process's id) from the environment, or None."""
    values = [os.environ.get(name) for name in PROCESS_VARIABLES]
    if not any(values):
        return None
    missing = [name for name, value in zip(PROCESS_VARIABLES, values) if not value]
    if missing:
        raise ProcessesError(f"{', '.join(missing)} not set beside {', '.join(n for n in PROCESS_VARIABLES if n not in missing)}: "
                             f"set all three (process 0's host:port, the process count, this process's id) or none")
    try:
        count, index = int(values[1]), int(values[2])
    except ValueError:
        raise ProcessesError(f"JAX_NUM_PROCESSES={values[1]!r} and JAX_PROCESS_ID={values[2]!r} must be "
                             f"whole numbers") from None
    if not 0 <= index < count:
        raise ProcessesError(f"JAX_PROCESS_ID={index} must be in 0..{count - 1} (JAX_NUM_PROCESSES={count})")
    return values[0], count, index


def join_processes(use_tpu):
    """jax.distributed.initialize as this run's processes need it (once per process); returns the
    process count."""
    named = named_processes()
    if jax.distributed.is_initialized():
        return jax.process_count()
    if named is not None:
        address, count, index = named
        if not use_tpu:  # CPU processes: their collectives through gloo
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)
    elif use_tpu:
        jax.distributed.initialize()
    return jax.process_count()
