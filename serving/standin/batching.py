"""Server-side batching (--enable_batching): TF Serving's BatchingSession in miniature.

Concurrent requests to one signature of one model version queue up as tasks; a
batch thread merges the tasks of a batch into one model call (inputs concatenated
along dimension 0, padded to the next allowed_batch_sizes entry with copies of the
first row of the last task, as TF Serving pads), then splits the outputs back.
The queue follows SharedBatchScheduler's rules:

  - a task larger than max_batch_size is refused (INVALID_ARGUMENT);
  - a task joins the open batch if it fits, else starts a new one; with
    max_enqueued_batches batches already waiting the task is refused with
    UNAVAILABLE (HTTP 503), TF Serving's "queue is full";
  - a batch is processed when it is full, when a newer batch has started after it,
    or when its first task has waited batch_timeout_micros (0: as soon as one of
    the num_batch_threads threads is free, so batches grow only while all are busy).

One addition of the stand-in's (TF Serving would wait out the timeout): a queue learns
how many of its requests are in flight at once under steady load (its callers), and an
open batch is ready as soon as every caller's request is in the scheduler, since no
other can join it before one is answered. The count is set by each batch that waits
out its timeout, raised whenever more requests are in flight, and forgotten when the
queue has been empty for IDLE_SECONDS, so a burst after a lull waits and merges as in
TF Serving. Readiness only lets a free batch thread take the batch earlier: no batch
is closed early, so batch sizes, padding and the queue limit behave as before.

As in TF Serving, one failing input (an undecodable image) fails every request
merged into its batch.

What is done once per batch rather than per request stays off the batch cycle's
critical path: the callers are woken in a chain (wake_tasks), work on the outputs can
be shared by the batch's requests (BatchOutputs: the REST answers' texts), and
a caller that does not wait (callback_task: the REST event loop's) gets its answer made
by the batch thread.

    .venv/bin/python -m serving.standin.server --model_base_path OUT/export/image_classifier \
        --enable_batching --batching_parameters_file batching.txt
"""
import collections
import collections.abc
import dataclasses
import itertools
import logging
import threading
import time

import numpy as np

from serving.standin import errors

# A queue empty this long has lost its callers: a client in a request loop sends its next
# request within a few ms even on a loaded machine, so only a real lull forgets the count.
IDLE_SECONDS = 0.05
log = logging.getLogger(__name__)


def held_lock():
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclasses.dataclass(eq=False)
class Task:
    """One request: {input name: numpy array [size, ...]}; the outputs or error come back here."""
    inputs: dict
    size: int
    enqueued: float = dataclasses.field(default_factory=time.monotonic)
    # Held until the task is done: the cheapest handoff between threads (a threading.Event
    # is a Condition and a Lock in Python code, ~20 us more per request under load).
    done: object = dataclasses.field(default_factory=held_lock)
    outputs: dict = None
    error: Exception = None
    # Set by run(): its caller, once woken, wakes the next such task of its batch (next_done).
    is_waiting_in_run: bool = False
    next_done: object = None


class CallWhenDone:
    """A Task's `done` for a caller that does not wait (an event loop): the batch thread's
    release() calls function(task) once task.outputs or task.error is set."""
    __slots__ = ("function", "task")

    def __init__(self, function):
        self.function, self.task = function, None

    def release(self):
        try:
            self.function(self.task)
        except Exception:  # noqa: BLE001 - the batch thread must go on to the next task
            log.exception("answering a batched request from the batch thread failed")


def callback_task(inputs, function):
    """A Task whose completion calls function(task) in the batch thread (CallWhenDone)."""
    done = CallWhenDone(function)
    task = Task(inputs, int(next(iter(inputs.values())).shape[0]), done=done)
    done.task = task
    return task


@dataclasses.dataclass(eq=False)
class Batch:
    tasks: list
    size: int
    started: float  # when its first task arrived: the batch timeout runs from here
    is_closed: bool = False


@dataclasses.dataclass(eq=False)
class Queue:
    """The batches of one (model, version, signature), oldest first; the last may be open."""
    run_batch: object  # callable({input name: numpy array}) -> {output name: numpy array}
    batches: collections.deque = dataclasses.field(default_factory=collections.deque)


@dataclasses.dataclass(eq=False)
class Callers:
    """The requests of one queue in flight (scheduled, not yet answered) and how many of
    them its steady load keeps in flight (None: not known, wait the timeout)."""
    in_flight: int = 0
    expected: int = None
    idle_since: float = 0.0

    def add(self, now):
        if self.in_flight == 0 and now - self.idle_since > IDLE_SECONDS:
            self.expected = None
        self.in_flight += 1
        if self.expected is not None:
            self.expected = max(self.expected, self.in_flight)

    def remove(self, count, now):
        self.in_flight -= count
        if self.in_flight == 0:
            self.idle_since = now

    @property
    def are_all_in(self):
        return self.expected is not None and self.in_flight >= self.expected


class BatchScheduler:
    """Queues of tasks served by num_batch_threads threads; run() blocks until a task is done."""

    def __init__(self, options, metrics=None):
        self.options, self.metrics = options, metrics
        self._queues = {}  # key -> Queue, while it holds batches
        self._callers = {}  # key -> Callers, kept while the queue is empty
        self._round_robin = itertools.count()
        self._condition = threading.Condition()
        self._is_stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"batch-{i}", daemon=True)
                         for i in range(options.num_batch_threads)]
        for thread in self._threads:
            thread.start()

    def run(self, key, run_batch, inputs):
        """The outputs of this request's rows, computed inside a merged batch (this thread
        waits for it; callback_task's callers do not)."""
        task = Task(inputs, int(next(iter(inputs.values())).shape[0]), is_waiting_in_run=True)
        self.schedule(key, run_batch, task)
        task.done.acquire()  # released once outputs or error are set (wake_tasks)
        if task.next_done is not None:
            task.next_done.release()  # the next caller of the batch, one at a time
        if task.error is not None:
            raise task.error
        return task.outputs

    def schedule(self, key, run_batch, task):
        """Queues a Task (or refuses it: InvalidArgument, Unavailable) without waiting for it.

        A batch thread calls task.done.release() once task.outputs or task.error is set:
        run() waits on the held lock a Task starts with; an event loop (rest_server.py,
        bench/floor_server.py) passes a callback_task, whose release() hands it the answer.
        """
        limit = self.options.max_batch_size
        if task.size > limit:
            raise errors.InvalidArgument(
                f"Task size {task.size} is larger than maximum input batch size {limit}")
        with self._condition:
            queue = self._queues.setdefault(key, Queue(run_batch))
            is_open = queue.batches and not queue.batches[-1].is_closed
            open_batch = queue.batches[-1] if is_open else None
            is_new = open_batch is None or open_batch.size + task.size > limit
            if is_new:
                if len(queue.batches) >= self.options.max_enqueued_batches:
                    raise errors.Unavailable(
                        "The batch scheduling queue to which this task was submitted is full")
                if open_batch is not None:
                    open_batch.is_closed = True
                open_batch = Batch([], 0, task.enqueued)
                queue.batches.append(open_batch)
            open_batch.tasks.append(task)
            open_batch.size += task.size
            open_batch.is_closed = open_batch.size >= limit
            callers = self._callers.setdefault(key, Callers())
            callers.add(task.enqueued)
            # Wake a batch thread only when a batch became ready or a new timeout started:
            # a task joining a waiting batch changes neither.
            if is_new or open_batch.is_closed or callers.are_all_in:
                self._condition.notify()

    def _work(self):
        """A batch thread: takes the next ready batch and processes it, until stop()."""
        while True:
            with self._condition:
                picked = self._take_ready_batch()
                while picked is None:
                    if self._is_stopping:
                        return
                    self._condition.wait(self._seconds_to_next_timeout())
                    picked = self._take_ready_batch()
            self._process(*picked)

    def _take_ready_batch(self):
        """(queue, batch, callers) of a ready batch, removed from its queue; queues taken in
        turn. A batch that waited out its timeout sets its queue's expected callers."""
        keys = list(self._queues)
        if not keys:
            return None
        start = next(self._round_robin) % len(keys)
        now = time.monotonic()
        for key in keys[start:] + keys[:start]:
            queue, callers = self._queues[key], self._callers[key]
            head = queue.batches[0] if queue.batches else None
            if head is None:
                continue
            is_early = head.is_closed or callers.are_all_in
            if is_early or now - head.started >= self.timeout_seconds:
                if not is_early:
                    callers.expected = callers.in_flight
                queue.batches.popleft()
                if not queue.batches:
                    del self._queues[key]
                return queue, head, callers
        return None

    @property
    def timeout_seconds(self):
        return self.options.batch_timeout_micros / 1e6

    def _seconds_to_next_timeout(self):
        """How long until the oldest open batch times out (None: until a task arrives)."""
        starts = [q.batches[0].started for q in self._queues.values() if q.batches]
        if not starts:
            return None
        return max(0.0, min(starts) + self.timeout_seconds - time.monotonic())

    def _process(self, queue, batch, callers):
        """One model call for the batch; every task gets its rows or the shared error."""
        started = time.monotonic()
        try:
            outputs = queue.run_batch(self.merge_inputs(batch))
            split_outputs(batch, outputs, round_to_allowed_size(self.options.allowed_batch_sizes,
                                                                batch.size))
        except Exception as e:  # noqa: BLE001 - the batch's error is every task's error
            for task in batch.tasks:
                task.error = e if isinstance(e, errors.ServingError) else errors.ServingError(
                    f"{type(e).__name__}: {e}")
        if self.metrics is not None:
            self.metrics.record_batch(self.options.thread_pool_name,
                                      [started - task.enqueued for task in batch.tasks])
        with self._condition:  # before the answers: a caller's next request is not extra
            callers.remove(len(batch.tasks), time.monotonic())
        wake_tasks(batch.tasks)

    def merge_inputs(self, batch):
        """{input name: tasks' tensors concatenated, padded to an allowed batch size}."""
        padded_size = round_to_allowed_size(self.options.allowed_batch_sizes, batch.size)
        merged = {}
        for name, first in batch.tasks[0].inputs.items():
            parts = [task.inputs[name] for task in batch.tasks]
            if any(part.shape[1:] != first.shape[1:] for part in parts):
                raise errors.FailedPrecondition(
                    f"Tensors with name '{name}' from different tasks have different shapes and "
                    "padding is turned off. Set pad_variable_length_inputs to true, or ensure "
                    "that all tensors with the same name have equal dimensions starting with "
                    "the first dim.")
            parts += [parts[-1][:1]] * (padded_size - batch.size)  # TF Serving's padding rows
            merged[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return merged

    def stop(self):
        with self._condition:
            self._is_stopping = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)


def wake_tasks(tasks):
    """Hands the batch's tasks back. The callers blocked in run() are woken in a chain, each
    by the one before it: released together, 8 threads woken at once preempt the batch
    thread on a busy 2-core machine while it still holds the GIL, and then queue for the GIL
    one by one anyway (py-spy --gil: a third of the batch thread's GIL time was spent in these
    releases). Other tasks (callback_task's, an event loop's) are released at once."""
    waiting = [task for task in tasks if task.is_waiting_in_run]
    for task, following in zip(waiting, waiting[1:]):
        task.next_done = following.done
    for task in tasks:
        if not task.is_waiting_in_run:
            task.done.release()
    if waiting:
        waiting[0].done.release()


def round_to_allowed_size(allowed_sizes, size):
    """The smallest allowed size >= size (size itself when none is configured)."""
    return next((allowed for allowed in allowed_sizes if allowed >= size), size)


def split_outputs(batch, outputs, padded_size):
    """Gives each task its rows of every output (an OutputsSlice); the padding rows are
    dropped."""
    if any(len(value.shape) == 0 or value.shape[0] != padded_size for value in outputs.values()):
        raise errors.FailedPrecondition(
            "Batched output tensor's 0th dimension does not equal the sum of the 0th dimension "
            "sizes of the input tensors")
    shared = BatchOutputs({name: value[:batch.size] for name, value in outputs.items()})
    start = 0
    for task in batch.tasks:
        task.outputs = OutputsSlice(shared, start, start + task.size)
        start += task.size


class BatchOutputs:
    """A batch's outputs (padding dropped), shared by its tasks, with a place for work done
    once for the whole batch instead of once per task: the REST answers' value texts are
    made for all rows by the first task's thread, the rest take their rows
    (rest_routes.column_texts). Off the batch cycle's critical path: 8 tasks formatting
    their rows one after another (the GIL serialises them) cost ~8x one batch's formatting."""

    def __init__(self, outputs):
        self.outputs = outputs
        self._lock = threading.Lock()
        self._made = {}

    def once(self, key, make):
        """make(self.outputs), computed by the first caller for this key, then shared."""
        with self._lock:
            if key not in self._made:
                self._made[key] = make(self.outputs)
            return self._made[key]


class OutputsSlice(collections.abc.Mapping):
    """One task's {output name: its rows}, which also knows its batch and row range; a row is
    sliced when it is read (a REST row answer reads none: it slices the batch's texts)."""
    __slots__ = ("batch", "start", "stop")

    def __init__(self, batch, start, stop):
        self.batch, self.start, self.stop = batch, start, stop

    def __getitem__(self, name):
        return self.batch.outputs[name][self.start:self.stop]

    def __iter__(self):
        return iter(self.batch.outputs)

    def __len__(self):
        return len(self.batch.outputs)
