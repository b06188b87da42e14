"""The input pipeline: batches of a pool decoded and preprocessed ahead, in worker processes.

One pipeline for every backend: a torch DataLoader (used as a process pool with prefetching, nothing
torch-specific crosses it) whose items are whole batches (`images_at`), handed over as numpy, so a backend
sees the same float32 NHWC arrays whether the data came from memory, a folder, tar shards or a table.
`workers=0` decodes in the calling process (no start-up cost: tests, small or resident data). Workers start with
'spawn' (a fork of a process running a multithreaded runtime such as XLA can deadlock). A worker never
raises: a corrupt file comes back as a value and is raised (or counted) here, so the message names the file
without a worker's traceback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from vitbench.transfer.pools import Batch, CorruptImage, Pool, images_at

PREFETCH_BATCHES = 2  # per worker: torch DataLoader's own default prefetch_factor


class _Batches:
    """Map-style dataset: item b = batch b decoded and preprocessed (a worker's whole unit of work)."""

    def __init__(self, pool: Pool, batches: Sequence[np.ndarray], resolution: int):
        self.pool, self.batches, self.resolution = pool, batches, resolution

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, b: int) -> Batch | CorruptImage:
        try:
            return images_at(self.pool, self.batches[b], self.resolution, skip_corrupt=True)
        except CorruptImage as e:  # pragma: no cover - images_at counts these itself with skip_corrupt
            return e


def _identity(x):
    return x


@dataclass
class InputStats:
    """What the pipeline cost: images delivered, seconds the consumer waited for them (input_s), seconds
    between deliveries spent elsewhere (the consumer's own work)."""

    images: int = 0
    input_s: float = 0.0
    wall_s: float = 0.0

    def metrics(self) -> dict:
        """input_img_per_s: images over the seconds spent waiting for input; input_bound_fraction: the share of
        the wall time spent waiting (0: the model never waited on the loader)."""
        return {"input_images": self.images,
                "input_img_per_s": self.images / self.input_s if self.input_s > 0 else None,
                "input_bound_fraction": self.input_s / self.wall_s if self.wall_s > 0 else None}


def stream(pool: Pool, batches: Sequence[np.ndarray], resolution: int, *, workers: int = 0,
           skip_corrupt: bool = False, stats: InputStats | None = None) -> Iterator[Batch]:
    """Batches of `pool` at the index arrays `batches`, in order, preprocessed at `resolution`. Files that do not
    decode: CorruptImage (exit 2) unless `skip_corrupt`, then dropped from their batch (Batch.failed names them)."""
    if workers <= 0 or pool.resident:
        items: Iterator = (images_at(pool, b, resolution, skip_corrupt=True) for b in batches)
    else:
        from torch.utils.data import DataLoader

        items = iter(DataLoader(_Batches(pool, batches, resolution), batch_size=None, shuffle=False,
                                num_workers=min(workers, max(len(batches), 1)), collate_fn=_identity,
                                multiprocessing_context="spawn", prefetch_factor=PREFETCH_BATCHES))
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
            if isinstance(b, CorruptImage):  # pragma: no cover
                raise b
            if b.failed and not skip_corrupt:
                origin, reason = next(iter(b.failed.items()))
                raise CorruptImage(origin, reason)
            stats.images += len(b.kept)
            yield b
    finally:  # also when the consumer stops early: the seconds spent so far
        stats.input_s += waited
        stats.wall_s += time.perf_counter() - start
