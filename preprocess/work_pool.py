"""A thread pool shared by every DoFn instance of a process, and a bounded queue of work in it.

Why: Beam's local runner (FnApiRunner) splits each stage statically, one part
per worker, so when one core is slower (a shared VM, a noisy neighbour) its
part finishes late while the other core idles; and worker threads that each
run Beam's per-element code contend for the GIL. Work handed to one
process-wide pool is taken by whichever thread is free, so the load balances
itself. The image work (PIL decode) releases the GIL, so the threads really
run in parallel.

Results come back in submission order, on the caller's thread: Beam's
counters and outputs belong to the bundle's own thread, never to a pool thread.

    python -m pytest tests/preprocess/test_work_pool.py
"""
import collections
import concurrent.futures
import os
import threading

_POOLS = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools_in_child():
    """A forked child has none of its parent's threads: it must start its own pools."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def shared_pool(threads):
    """The process's pool of ``threads`` threads, created on first use."""
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = concurrent.futures.ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix=f"work_pool_{threads}")
        return _POOLS[threads]


class WorkQueue:
    """Calls run in a shared pool, at most ``limit`` pending; done ones are handed back
    oldest first as (context, future).

    ``threads`` <= 1 runs each call at once on the caller's thread (no pool),
    with the same interface, so callers have one code path.
    """

    def __init__(self, threads, limit):
        if limit < 1:
            raise ValueError(f"limit={limit} must be >= 1")
        self._pool = shared_pool(threads) if threads > 1 else None
        self._limit = limit
        self._pending = collections.deque()

    def submit(self, context, function, *args):
        """Queues ``function(*args)``; returns the (context, future) pairs now due, oldest first."""
        if self._pool is None:
            future = concurrent.futures.Future()
            try:
                future.set_result(function(*args))
            except Exception as err:  # handed to the caller through the future, as a pool would
                future.set_exception(err)
            return [(context, future)]
        self._pending.append((context, self._pool.submit(function, *args)))
        due = []
        while len(self._pending) > self._limit:
            due.append(self._pending.popleft())
        return due

    def drain(self):
        """Every pending (context, future), oldest first; the queue is empty afterwards."""
        due = list(self._pending)
        self._pending.clear()
        return due

    def __len__(self):
        return len(self._pending)
