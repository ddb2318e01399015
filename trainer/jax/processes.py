"""The JAX processes of a run: one per host, joined by jax.distributed before any computation.

On a Cloud TPU (--use_tpu: a TPU VM, every host of a slice started with `--worker=all`,
or a GKE TPU node pool) JAX finds the other hosts itself: jax.distributed.initialize()
with no arguments. Anywhere else several processes name each other through JAX's own
variables, JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and
JAX_PROCESS_ID; on CPU they then talk through gloo (tests/trainer/jax/test_jax_data.py
runs two on one machine). Without either, one process: nothing to join.

Of several processes, process 0 writes OUT and the others only read it (JaxProcesses, the run
room's Processes: trainer/run/engine.py): what process 0 alone does (take the lock, save a
checkpoint, record an evaluation, export) it does inside from_writer, and its answer (a result,
or the exception it raised) goes to the others through the coordinator's key-value store of
jax.distributed, which each waits on at most WRITER_TIMEOUT_SECONDS. So a save is whole before
any process reads it, every process takes the same decisions, and process 0's refusal (OUT
locked by another trainer, say) is every process's one line. A stop signal is agreed between
training calls (agree_on_stop): every process saves and stops after the same call.

    JAX_COORDINATOR_ADDRESS=localhost:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
        .venv-jax/bin/python -m tests.trainer.jax.two_hosts DATA
"""
import contextlib
import os
import pickle

import jax
from jax._src import distributed  # the coordinator's key-value store: JAX has no public handle on it

from common import console
from common.user_errors import UserError
from trainer.run.engine import ONE_PROCESS

PROCESS_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
# How long a process waits for process 0's answer: the longest thing process 0 does alone is a
# big network's export or checkpoint to gs://, minutes. A dead process 0 is noticed sooner: its
# coordinator goes with it, and the others' waits fail (jax.distributed's heartbeat, 100 s).
WRITER_TIMEOUT_SECONDS = 3600


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
    # JAX's preemption service takes SIGTERM from Python for reached_preemption_sync_point, which
    # this trainer does not call: SIGTERM would be swallowed and training go on. The trainer's own
    # handler (common/console.py) and agree_on_stop answer it instead.
    jax.config.update("jax_enable_preemption_service", False)
    if named is not None:
        address, count, index = named
        if not use_tpu:  # CPU processes: their collectives through gloo
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)
    elif use_tpu:
        jax.distributed.initialize()
    return jax.process_count()


class WriterFailed(RuntimeError):
    """What process 0 raised, when it does not travel as itself (it does not pickle)."""


class JaxProcesses:
    """The run's JAX processes (trainer/run/engine.py's Processes): process 0 writes OUT."""

    def __init__(self):
        self.is_writer = jax.process_index() == 0
        self.calls = 0  # every process makes the same calls in the same order
        self.is_writing = False  # inside the writer's own write: a nested call is its alone

    def from_writer(self, name, write):
        if self.is_writing:
            return write()
        self.calls += 1
        key = f"trainer/{self.calls}/{name}"
        if not self.is_writer:
            is_returned, value = pickle.loads(distributed.global_state.client.blocking_key_value_get_bytes(
                key, WRITER_TIMEOUT_SECONDS * 1000))
            if is_returned:
                return value
            raise value
        self.is_writing = True
        try:
            value = write()
        except BaseException as err:  # noqa: BLE001 - sent to the others, then raised here too
            publish(key, (False, err))
            raise
        finally:
            self.is_writing = False
        publish(key, (True, value))
        return value


def publish(key, answer):
    """Puts process 0's answer (is_returned, value or exception) where the others wait for it."""
    try:
        data = pickle.dumps(answer)
    except Exception:  # noqa: BLE001 - an exception that does not pickle goes as its line
        data = pickle.dumps((False, WriterFailed(f"process 0: {type(answer[1]).__name__}: {answer[1]}")))
    distributed.global_state.client.key_value_set_bytes(key, data)


def join_team(use_tpu):
    """The run's processes, joined (join_processes): ONE_PROCESS alone, else a JaxProcesses."""
    return JaxProcesses() if join_processes(use_tpu) > 1 else ONE_PROCESS


@contextlib.contextmanager
def leaving_together(team):
    """The block, then every process of several leaves jax.distributed together, however the
    block ended (a result, a refusal, a stop signal): one that left without saying so would
    be taken for dead by the coordinator, which then aborts the others."""
    try:
        yield
    finally:
        if team is not ONE_PROCESS:
            jax.distributed.shutdown()


def agree_on_stop(team, call):
    """True on every process when a stop signal came to any of them before training call `call`
    ended: each says which it got, and one that got none takes the first named as its own, so
    that all save the same step and end alike (exit 143 for SIGTERM)."""
    if team is ONE_PROCESS:
        return console.is_termination_requested()
    client = distributed.global_state.client
    client.key_value_set(f"trainer/stop/{call}/{jax.process_index()}", console.requested_stop() or "")
    names = [client.blocking_key_value_get(f"trainer/stop/{call}/{index}", WRITER_TIMEOUT_SECONDS * 1000)
             for index in range(jax.process_count())]
    named = next((name for name in names if name), None)
    if named:
        console.note_stop_signal(named)
    return named is not None
