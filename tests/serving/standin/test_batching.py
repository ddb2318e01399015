"""The batch scheduler on its own: merging, padding, splitting, queue limits, shared errors.

A fake model call records what it is given, so every rule is checked exactly.

    .venv/bin/python -m pytest tests/serving/standin/test_batching.py
"""
import threading
import time

import numpy as np
import pytest

from serving.standin import batching, config_files, errors


class RecordingModel:
    """run_batch for the scheduler: doubles its input; can be held until released."""

    def __init__(self, is_held=False):
        self.calls, self.release = [], threading.Event()
        if not is_held:
            self.release.set()

    def __call__(self, merged):
        self.calls.append(np.asarray(merged["x"]).tolist())
        self.release.wait(30)
        return {"y": np.asarray(merged["x"]) * 2}


def options(**values):
    return config_files.BatchingOptions(**{"num_batch_threads": 1, **values})


def run_concurrently(scheduler, model, rows_per_task, key="k"):
    """Each task's outputs (or error), scheduled from one thread per task at once."""
    results, barrier = [None] * len(rows_per_task), threading.Barrier(len(rows_per_task))

    def send(i):
        barrier.wait()
        try:
            results[i] = scheduler.run(key, model, {"x": np.array(rows_per_task[i])})["y"].tolist()
        except errors.ServingError as e:
            results[i] = e
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(rows_per_task))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_concurrent_tasks_become_one_model_call_and_are_split_back():
    scheduler = batching.BatchScheduler(options(max_batch_size=8, batch_timeout_micros=2_000_000))
    model = RecordingModel()
    tasks = [[1], [2], [3, 4], [5], [6, 7, 8]]  # 8 rows: the batch is full, no timeout wait
    results = run_concurrently(scheduler, model, tasks)
    scheduler.stop()
    assert len(model.calls) == 1 and sorted(model.calls[0]) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert results == [[2], [4], [6, 8], [10], [12, 14, 16]]


def test_batches_are_padded_to_an_allowed_size_with_the_last_tasks_first_row():
    scheduler = batching.BatchScheduler(options(max_batch_size=8, allowed_batch_sizes=(4, 8)))
    model = RecordingModel()
    assert scheduler.run("k", model, {"x": np.array([5, 6, 7])})["y"].tolist() == [10, 12, 14]
    scheduler.stop()
    assert model.calls == [[5, 6, 7, 5]]  # padded from 3 to 4; the padding row is dropped


def test_a_task_larger_than_max_batch_size_is_invalid():
    scheduler = batching.BatchScheduler(options(max_batch_size=2))
    with pytest.raises(errors.InvalidArgument, match="Task size 3 is larger than maximum input "
                                                     "batch size 2"):
        scheduler.run("k", RecordingModel(), {"x": np.array([1, 2, 3])})
    scheduler.stop()


def test_a_full_queue_is_unavailable():
    """One batch running (held), one waiting: with max_enqueued_batches=1 the next is refused."""
    scheduler = batching.BatchScheduler(options(max_batch_size=1, max_enqueued_batches=1))
    model = RecordingModel(is_held=True)
    first = threading.Thread(target=scheduler.run, args=("k", model, {"x": np.array([1])}))
    first.start()
    while not model.calls:  # the batch thread has taken it: the queue is empty again
        threading.Event().wait(0.01)
    second = threading.Thread(target=scheduler.run, args=("k", model, {"x": np.array([2])}))
    second.start()
    while not scheduler._queues:  # noqa: SLF001 - wait until the second task is queued
        threading.Event().wait(0.01)
    with pytest.raises(errors.Unavailable, match="The batch scheduling queue to which this "
                                                 "task was submitted is full") as raised:
        scheduler.run("k", model, {"x": np.array([3])})
    assert (raised.value.http_status, raised.value.grpc_code.name) == (503, "UNAVAILABLE")
    model.release.set()
    first.join(30)
    second.join(30)
    scheduler.stop()
    assert model.calls == [[1], [2]]


def test_one_failing_batch_fails_every_task_in_it():
    def failing(merged):
        raise errors.InvalidArgument(f"bad input among {merged['x'].shape[0]} rows")
    scheduler = batching.BatchScheduler(options(max_batch_size=3, batch_timeout_micros=2_000_000))
    results = run_concurrently(scheduler, failing, [[1], [2], [3]])
    scheduler.stop()
    assert [str(r) for r in results] == ["bad input among 3 rows"] * 3


def test_tasks_of_different_inner_shapes_fail_their_batch_as_in_tf_serving():
    scheduler = batching.BatchScheduler(options(max_batch_size=2, batch_timeout_micros=2_000_000))
    results = run_concurrently(scheduler, RecordingModel(), [[[1, 2]], [[1, 2, 3]]])
    scheduler.stop()
    assert all(isinstance(r, errors.FailedPrecondition) for r in results)
    assert "Tensors with name 'x' from different tasks have different shapes" in str(results[0])


def test_different_keys_never_share_a_batch():
    scheduler = batching.BatchScheduler(options(max_batch_size=4, batch_timeout_micros=300_000))
    model = RecordingModel()
    results = [None, None]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(
        i, scheduler.run(f"key{i}", model, {"x": np.array([i + 1])})["y"].tolist()))
        for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    scheduler.stop()
    assert results == [[2], [4]] and sorted(model.calls) == [[1], [2]]


def test_a_batch_that_is_not_full_waits_out_its_timeout_every_time():
    """Three callers, batches of eight: each batch waits batch_timeout_micros for company,
    the second as the first (TF Serving's SharedBatchScheduler learns nothing from the first)."""
    timeout = 0.5
    scheduler = batching.BatchScheduler(options(max_batch_size=8,
                                                batch_timeout_micros=int(timeout * 1e6)))
    model = RecordingModel()
    assert run_concurrently(scheduler, model, [[1], [2], [3]]) == [[2], [4], [6]]
    start = time.monotonic()
    results = run_concurrently(scheduler, model, [[4], [5], [6]])
    elapsed = time.monotonic() - start
    scheduler.stop()
    assert results == [[8], [10], [12]]
    assert [sorted(call) for call in model.calls] == [[1, 2, 3], [4, 5, 6]]
    assert elapsed >= timeout, f"second batch after {elapsed:.3f} s"


def test_round_to_allowed_size():
    assert [batching.round_to_allowed_size((2, 4, 8), n) for n in (1, 2, 3, 8)] == [2, 2, 4, 8]
    assert batching.round_to_allowed_size((), 5) == 5
    assert np.array_equal(RecordingModel()({"x": np.array([1])})["y"], [2])
