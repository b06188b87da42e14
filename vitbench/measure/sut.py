"""The system under test of a LoadGen run (vitbench.measure.loadgen): `BatchingSUT`, a queue of the samples
LoadGen issues and one worker thread that batches them (the batching policy: loadgen.py's module docstring)."""

from __future__ import annotations

import collections
import queue
import threading
import time
from concurrent.futures import Executor
from typing import Any

import numpy as np


class BatchingSUT:
    """The system under test: a queue of issued samples and one worker thread that batches them (the policy:
    loadgen.py's module docstring). `steps` maps each prepared batch size to a callable that answers a full batch
    of host images with their outputs (`Workload.infer_host`), or, without host input, ignores them and runs the
    workload's own batch."""

    def __init__(self, lg, images: np.ndarray, steps: dict[int, Any], max_batch: int, max_wait_s: float,
                 host_input: bool, worker: Executor):
        self.lg, self.images, self.steps = lg, images, steps
        self.sizes = sorted(steps)
        self.max_batch, self.max_wait_s, self.host_input = max_batch, max_wait_s, host_input
        # what LoadGen issued, in order (`issue`; None: stop); `_head` the list of samples being batched from
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        self._head: list = []
        self._pos = 0  # the head's next sample
        # samples per batch run -> how many such batches (a count, not a list: 7 M entries in a 55 M-sample
        # Offline run at batch 8)
        self.batches: collections.Counter[int] = collections.Counter()
        self.padded = 0  # padding samples run (a batch filled up to a prepared size)
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        # `worker`: one thread; the one that ran the steps' warm-up runs the batches too (vitbench.measure.serve)
        self._executor, self._done = worker, None

    def issue(self, samples) -> None:  # LoadGen's thread: never blocks
        # `samples`: the list LoadGen's binding made for this call, of QuerySample objects of its own (a copy of
        # the query's). Several (an Offline query: every sample of the run) are queued as that list, batched
        # from in place: a tuple (id, index) for each besides held 128 bytes a sample more (loadgen.py,
        # BYTES_PER_SCHEDULED_SAMPLE); one alone (Server, SingleStream) as its (id, index), smaller than the
        # QuerySample and its list
        if len(samples) == 1:
            self.pending.put((samples[0].id, samples[0].index))
        elif len(samples):
            self.pending.put(samples)

    def flush(self) -> None:
        pass

    def start(self) -> None:
        self._done = self._executor.submit(self._serve)

    def stop(self) -> None:
        self._stop.set()
        self.pending.put(None)
        if self._done is not None:
            try:
                self._done.result()
            except BaseException as e:  # noqa: BLE001 - `run` raises the first failure after LoadGen's clean-up
                self.failure = self.failure or e

    def _next(self, deadline: float | None):
        """The next issued item (a sample, a list of samples, or None: stop): waited for without limit while the
        batch is empty (`deadline` None), then until `deadline` (queue.Empty past it)."""
        if deadline is None:
            return self.pending.get()
        try:
            return self.pending.get_nowait()  # what is already waiting, even at max_wait 0
        except queue.Empty:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise
            return self.pending.get(timeout=left)

    def _take(self) -> list | None:
        """The next batch: the oldest sample, then whatever arrives within max_wait, up to max_batch, each as its
        (id, index), in issue order. None: stop."""
        batch: list = []
        deadline = None  # set once the batch holds its first sample
        while len(batch) < self.max_batch:
            if self._pos < len(self._head):  # what is left of an issued list
                k = min(self.max_batch - len(batch), len(self._head) - self._pos)
                batch += [(q.id, q.index) for q in self._head[self._pos:self._pos + k]]
                self._pos += k
            else:
                self._head, self._pos = [], 0  # an issued list batched whole is let go (Offline: the run's)
                try:
                    item = self._next(deadline)
                except queue.Empty:
                    break
                if item is None:
                    if batch:
                        self.pending.put(None)  # stop after this batch
                    return batch or None
                if isinstance(item, list):
                    self._head = item
                    continue
                batch.append(item)  # a sample issued alone
            if deadline is None:
                deadline = time.perf_counter() + self.max_wait_s
        return batch

    def _serve(self) -> None:
        while not self._stop.is_set():
            batch = self._take()
            if batch is None:
                return
            try:
                self._run(batch)
            except BaseException as e:  # noqa: BLE001 - reported by `run`; LoadGen must still see completions
                self.failure = self.failure or e
                self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(i, 0, 0) for i, _ in batch])

    def _run(self, batch: list) -> None:
        n = len(batch)
        size = next(s for s in self.sizes if s >= n)
        index = np.fromiter((j for _, j in batch), np.int64, n)
        if size > n:
            index = np.concatenate([index, np.full(size - n, index[0])])
            self.padded += size - n
        self.batches[n] += 1
        out = self.steps[size](self.images[index])
        if self.host_input:
            classes = np.ascontiguousarray(np.argmax(out[:n], axis=1).astype(np.int32))
        else:  # the workload ran its own batch: no prediction of these samples to report
            classes = np.zeros(n, np.int32)
        address = classes.ctypes.data
        self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(i, address + 4 * k, 4)
                                      for k, (i, _) in enumerate(batch)])
