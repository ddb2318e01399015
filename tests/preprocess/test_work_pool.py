"""The shared pool and its bounded, ordered work queue."""
import pathlib
import subprocess
import sys
import threading

import pytest

from preprocess import work_pool

ROOT = pathlib.Path(__file__).resolve().parents[2]


def thread_name(value):
    return value, threading.current_thread().name


def fail_on_odd(value):
    if value % 2:
        raise ValueError(f"odd {value}")
    return value


def run_all(queue, values, function):
    """Submits every value; -> [(context, result or the exception's text)] in the order handed back."""
    handed_back = []
    for value in values:
        handed_back.extend(queue.submit(f"c{value}", function, value))
        assert len(queue) <= 3  # never more pending than the limit
    handed_back.extend(queue.drain())
    results = []
    for context, future in handed_back:
        try:
            results.append((context, future.result()))
        except ValueError as err:
            results.append((context, str(err)))
    return results


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_results_come_back_once_each_in_submission_order(threads):
    results = run_all(work_pool.WorkQueue(threads, limit=3), range(20), fail_on_odd)
    assert results == [(f"c{v}", v if v % 2 == 0 else f"odd {v}") for v in range(20)]


def test_with_threads_the_work_runs_in_the_shared_pool_threads():
    results = run_all(work_pool.WorkQueue(2, limit=3), range(8), thread_name)
    names = {name for _, (_, name) in results}
    assert names and all(name.startswith("work_pool_2") for name in names)
    assert work_pool.shared_pool(2) is work_pool.shared_pool(2)


def test_one_thread_runs_inline_on_the_callers_thread():
    results = run_all(work_pool.WorkQueue(1, limit=3), range(3), thread_name)
    assert {name for _, (_, name) in results} == {threading.current_thread().name}


def test_limit_must_be_positive():
    with pytest.raises(ValueError, match="limit=0"):
        work_pool.WorkQueue(2, limit=0)


FORK_CHECK = """
import multiprocessing
from preprocess import work_pool

def sum_in_pool(values):
    queue = work_pool.WorkQueue(2, limit=3)
    due = [pair for value in values for pair in queue.submit(None, abs, value)]
    return sum(future.result() for _, future in due + queue.drain())

assert sum_in_pool([-1, 2, -3]) == 6  # the parent now has a live pool
with multiprocessing.get_context("fork").Pool(1) as pool:
    print(pool.apply_async(sum_in_pool, ([-4, 5, -6],)).get(timeout=30))
"""


@pytest.mark.process
def test_a_forked_child_starts_its_own_pool():
    """The parent's pool threads do not exist in a fork: reusing the pool would hang.

    Forked from a fresh interpreter: a test worker that has run TensorFlow and gRPC has
    hundreds of threads, and a fork of it can inherit a lock one of them held (it did: the
    pool's queue lock, and the suite waited forever)."""
    done = subprocess.run([sys.executable, "-c", FORK_CHECK], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "15"
