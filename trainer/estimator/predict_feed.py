"""The chunks of one Estimator predict run, read once and fed to every host's input pipeline.

trainer/estimator/predict.py makes ONE TPUEstimator.predict call per run (a call builds a
graph, runs model_fn, opens a session and restores the checkpoint); its input streams the
chunks of trainer/run/predictions.py through a generator. ChunkFeed reads each chunk from
the source when the first host asks for it and forgets it once every host has taken it, so
memory holds about one chunk; ChunkRows gives the predictions back one array per chunk, in
input order, as soon as a chunk's images are all classified.

    .venv/bin/python -m pytest tests/trainer/test_predict_units.py -k chunk
"""
import collections
import threading

import numpy as np


class ChunkFeed:
    """Chunks (lists of JPEG bytes) of a one-pass source, numbered from 0, each handed to
    every host once. The source is read in the input pipeline's thread: an error it raises
    is kept and raised again in the caller's (raise_error) instead of inside TensorFlow."""

    def __init__(self, jpeg_chunks):
        self._source = iter(jpeg_chunks)
        self._lock = threading.Lock()
        self._held = {}  # chunk number -> [first image's index, jpegs, hosts that took it]
        self._read = 0  # chunks read from the source
        self._next_index = 0  # index of the next chunk's first image, counted over the run
        self.sizes = collections.deque()  # (first index, count) of each chunk read, for ChunkRows
        self._error = None

    def take(self, number, num_hosts):
        """(first index, jpegs) of chunk `number` for one of num_hosts hosts; None after the last."""
        with self._lock:
            if number == self._read and not self._read_one():
                return None
            entry = self._held[number]  # KeyError: a host asked for a chunk twice
            entry[2] += 1
            if entry[2] == num_hosts:
                del self._held[number]
            return entry[0], entry[1]

    def _read_one(self):
        try:
            jpegs = next(self._source, None)
        except Exception as error:  # pylint: disable=broad-except  # raised again by raise_error
            self._error, jpegs = error, None
        if jpegs is None:
            return False
        self._held[self._read] = [self._next_index, list(jpegs), 0]
        self.sizes.append((self._next_index, len(jpegs)))
        self._read += 1
        self._next_index += len(jpegs)
        return True

    def raise_error(self):
        if self._error is not None:
            raise self._error


class ChunkRows:
    """Prediction rows by image index (any order, any host) -> one float32 array per chunk,
    in chunk order (None for a chunk without images), once all of its rows have come."""

    def __init__(self, sizes):
        self._sizes = sizes  # ChunkFeed.sizes: filled as chunks are read
        self._rows = {}
        self._cursor = None  # the front chunk's first index not yet come

    def add(self, index, row):
        """Keeps one row; returns the chunks it (with the rows before it) completes."""
        self._rows[index] = row
        return list(self.finished())

    def finished(self):
        while self._sizes:
            start, count = self._sizes[0]
            cursor = start if self._cursor is None else self._cursor
            while cursor < start + count and cursor in self._rows:
                cursor += 1
            if cursor < start + count:
                self._cursor = cursor
                return
            self._sizes.popleft()
            self._cursor = None
            yield np.stack([self._rows.pop(i) for i in range(start, start + count)]) if count else None

    def check_complete(self):
        """RuntimeError unless every chunk's rows came back, each once."""
        missing = sum(count for _, count in self._sizes)
        if missing or self._rows:
            raise RuntimeError(f"predict left {missing} image(s) unclassified and returned "
                               f"{len(self._rows)} row(s) of no image")
