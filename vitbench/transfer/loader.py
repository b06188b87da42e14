"""The input pipeline: batches of a pool decoded and preprocessed ahead, in worker processes.

One pipeline for every backend: a process pool whose unit of work is a whole batch (`images_at`), handed over as
numpy, so a backend sees the same float32 NHWC arrays whether the data came from memory, a folder, tar shards or
a table. At most `workers x PREFETCH_BATCHES` batches are in flight, so memory stays bounded by the batch
whatever the consumer's speed (a plain `Pool.imap` would queue every finished batch). The pool object (file
list, shard index) is sent to each worker once, at start; a task carries only its indices. `workers=0` decodes
in the calling process (no start-up cost: tests, small or resident data). Workers start with 'spawn' (a fork of a
process running a multithreaded runtime such as XLA can deadlock). A worker never raises for a corrupt file: it
comes back as a value and is raised (or counted) here, so the message names the file without a worker's
traceback.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from vitbench.transfer.pools import Batch, CorruptImage, Pool, images_at

PREFETCH_BATCHES = 2  # in flight per worker (torch DataLoader's default prefetch_factor)

_WORKER: dict = {}  # in a worker process: the pool and resolution it decodes for


def _start_worker(pool: Pool, resolution: int) -> None:
    _WORKER.update(pool=pool, resolution=resolution)


def _work(idx: np.ndarray) -> Batch:
    return images_at(_WORKER["pool"], idx, _WORKER["resolution"], skip_corrupt=True)


def _ahead(pool: Pool, batches: Sequence[np.ndarray], resolution: int, workers: int) -> Iterator[Batch]:
    """`batches` decoded by `workers` spawned processes, in order, at most workers x PREFETCH_BATCHES ahead."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker, initargs=(pool, resolution)) as ex:
        pending: deque = deque()
        todo = iter(batches)
        for b in todo:
            pending.append(ex.submit(_work, b))
            if len(pending) >= workers * PREFETCH_BATCHES:
                break
        while pending:
            done = pending.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(ex.submit(_work, nxt))
            yield done


@dataclass
class InputStats:
    """What the pipeline cost: images delivered, seconds the consumer waited for them (input_s), and the wall
    seconds of the passes (wall_s: from the first request to the last delivery, the consumer's own work
    included)."""

    images: int = 0
    input_s: float = 0.0
    wall_s: float = 0.0

    def snapshot(self) -> tuple[int, float]:
        return self.images, self.input_s

    def metrics(self, since: tuple[int, float] = (0, 0.0), wall_s: float | None = None) -> dict:
        """input_img_per_s: images over the seconds spent waiting for input; input_bound_fraction: the share of
        the wall time spent waiting (0: the model never waited on the loader; 1: only the loader worked).
        `since` (a snapshot) and `wall_s` (the caller's own clock, e.g. a training loop's): one phase of a run."""
        images, waited = self.images - since[0], self.input_s - since[1]
        wall = self.wall_s if wall_s is None else wall_s
        return {"input_images": images,
                "input_img_per_s": images / waited if waited > 0 else None,
                "input_bound_fraction": min(waited / wall, 1.0) if wall and wall > 0 else None}


def stream(pool: Pool, batches: Sequence[np.ndarray], resolution: int, *, workers: int = 0,
           skip_corrupt: bool = False, stats: InputStats | None = None) -> Iterator[Batch]:
    """Batches of `pool` at the index arrays `batches`, in order, preprocessed at `resolution`. Files that do not
    decode: CorruptImage (exit 2) unless `skip_corrupt`, then dropped from their batch (Batch.failed names them)."""
    if workers <= 0 or pool.resident or not batches:
        items: Iterator = (images_at(pool, b, resolution, skip_corrupt=True) for b in batches)
    else:
        items = _ahead(pool, batches, resolution, min(workers, len(batches)))
    stats = stats if stats is not None else InputStats()
    start, waited = time.perf_counter(), 0.0
    try:
        while True:
            t0 = time.perf_counter()
            try:
                b = next(items)
            except StopIteration:
                break
            finally:
                waited += time.perf_counter() - t0
            if b.failed and not skip_corrupt:
                origin, reason = next(iter(b.failed.items()))
                raise CorruptImage(origin, reason)
            stats.images += len(b.kept)
            yield b
    finally:  # also when the consumer stops early: the seconds spent so far
        stats.input_s += waited
        stats.wall_s += time.perf_counter() - start
