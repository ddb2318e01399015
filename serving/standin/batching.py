"""Server-side batching (--enable_batching): TF Serving's BatchingSession and SharedBatchScheduler in miniature.

Concurrent requests to one signature of one version queue as tasks under that key;
num_batch_threads shared threads merge a batch's tasks into one model call (padded to
the next allowed_batch_sizes entry with copies of the last task's first row, as TF
Serving pads) and split the outputs back. SharedBatchScheduler's rules: a batch runs
when full, when a newer one has started, or when its first task has waited
batch_timeout_micros; a task over max_batch_size is INVALID_ARGUMENT, one finding
max_enqueued_batches waiting UNAVAILABLE (HTTP 503). One failing input fails every
request merged into its batch, as in TF Serving.

    .venv/bin/python -m serving.standin.server --model_base_path OUT/export/image_classifier \
        --enable_batching --batching_parameters_file batching.txt
"""
import collections
import dataclasses
import itertools
import logging
import threading
import time

import numpy as np

from serving.standin import errors

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class Task:
    """One request's {input name: numpy array [size, ...]}; when_done(outputs, error) when its
    batch is done."""
    inputs: dict
    when_done: object
    enqueued: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def size(self):
        return int(next(iter(self.inputs.values())).shape[0])


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


class BatchScheduler:
    """Per-key queues of tasks served by num_batch_threads shared threads."""

    def __init__(self, options, metrics=None):
        self.options, self.metrics = options, metrics
        self._queues = {}  # key -> Queue, while it holds batches
        self._round_robin = itertools.count()
        self._condition = threading.Condition()
        self._is_stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"batch-{i}", daemon=True)
                         for i in range(options.num_batch_threads)]
        for thread in self._threads:
            thread.start()

    def run(self, key, run_batch, inputs):
        """The outputs of this request's rows, computed inside a merged batch; waits for it."""
        done, result = threading.Event(), []

        def when_done(outputs, error):
            result.append((outputs, error))
            done.set()
        self.schedule(key, run_batch, Task(inputs, when_done))
        done.wait()
        outputs, error = result[0]
        if error is not None:
            raise error
        return outputs

    def schedule(self, key, run_batch, task):
        """Queues a Task without waiting for it; InvalidArgument or Unavailable refuse it."""
        limit, size = self.options.max_batch_size, task.size
        if size > limit:
            raise errors.InvalidArgument(
                f"Task size {size} is larger than maximum input batch size {limit}")
        with self._condition:
            queue = self._queues.setdefault(key, Queue(run_batch))
            is_open = queue.batches and not queue.batches[-1].is_closed
            batch = queue.batches[-1] if is_open else None
            if batch is None or batch.size + size > limit:
                if len(queue.batches) >= self.options.max_enqueued_batches:
                    raise errors.Unavailable(
                        "The batch scheduling queue to which this task was submitted is full")
                if batch is not None:
                    batch.is_closed = True
                batch = Batch([], 0, task.enqueued)
                queue.batches.append(batch)
            batch.tasks.append(task)
            batch.size += size
            batch.is_closed = batch.size >= limit
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
        """(queue, batch) of a ready batch, removed from its queue; queues taken in turn."""
        keys = list(self._queues)
        if not keys:
            return None
        start = next(self._round_robin) % len(keys)
        now = time.monotonic()
        for key in keys[start:] + keys[:start]:
            queue = self._queues[key]
            head = queue.batches[0]
            if head.is_closed or self._is_stopping or now - head.started >= self.timeout_seconds:
                queue.batches.popleft()
                if not queue.batches:
                    del self._queues[key]
                return queue, head
        return None

    @property
    def timeout_seconds(self):
        return self.options.batch_timeout_micros / 1e6

    def _seconds_to_next_timeout(self):
        """How long until the oldest open batch times out (None: until a task arrives)."""
        starts = [q.batches[0].started for q in self._queues.values()]
        if not starts:
            return None
        return max(0.0, min(starts) + self.timeout_seconds - time.monotonic())

    def _process(self, queue, batch):
        """One model call for the batch; every task gets its rows or the shared error."""
        started = time.monotonic()
        try:
            outputs = queue.run_batch(self.merge_inputs(batch))
            results = split_outputs(batch, outputs, round_to_allowed_size(
                self.options.allowed_batch_sizes, batch.size))
        except Exception as e:  # noqa: BLE001 - the batch's error is every task's error
            error = e if isinstance(e, errors.ServingError) else errors.ServingError(
                f"{type(e).__name__}: {e}")
            results = [(None, error)] * len(batch.tasks)
        if self.metrics is not None:
            self.metrics.record_batch(self.options.thread_pool_name,
                                      [started - task.enqueued for task in batch.tasks])
        for task, (task_outputs, error) in zip(batch.tasks, results):
            try:
                task.when_done(task_outputs, error)
            except Exception:  # noqa: BLE001 - the batch thread goes on to the next task
                log.exception("answering a batched request from the batch thread failed")

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
            thread.join()


def round_to_allowed_size(allowed_sizes, size):
    """The smallest allowed size >= size (size itself when none is configured)."""
    return next((allowed for allowed in allowed_sizes if allowed >= size), size)


def split_outputs(batch, outputs, padded_size):
    """[(each task's {output name: its rows}, None)]; the padding rows are dropped."""
    if any(len(value.shape) == 0 or value.shape[0] != padded_size for value in outputs.values()):
        raise errors.FailedPrecondition(
            "Batched output tensor's 0th dimension does not equal the sum of the 0th dimension "
            "sizes of the input tensors")
    results, start = [], 0
    for task in batch.tasks:
        size = task.size
        results.append(({name: value[start:start + size] for name, value in outputs.items()},
                        None))
        start += size
    return results
