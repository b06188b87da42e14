"""The up-front data check (`--check-data`, study field data.check_data): every image a source lists verified
before any model is built, so a corrupt file stops the run at once (exit 2 naming it) instead of partway, or,
with `--skip-corrupt`, is counted from the start.

A check reads every file whole but decodes little (vitbench.transfer.pools.check_image: a PNG's chunk CRCs and
its image data inflated, not unfiltered; a JPEG at 1/8 scale): about 40 % of one decode pass on 128-px PNGs, 3-6 %
before the inflation was added (docs/datasets.md, measured). It is opt-in: a run that reads a fraction of a large
dataset (few-shot decodes its k-shot draws, val and test; `bench --data` a few steps) would read all of it to
check it (docs/datasets.md).
Resident pools (digits, synthetic, cifar, npz) are arrays already checked when read; they are not re-checked.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from vitbench.errors import ConfigError
from vitbench.transfer.pools import CorruptImage, Pool, check_image

CHUNK = 256  # images per task handed to a worker process

_WORKER: dict = {}


def _start_worker(pool: Pool) -> None:
    _WORKER["pool"] = pool


def check_indices(pool: Pool, idx: Iterable[int]) -> dict[str, str]:
    """{origin: reason} of the images of `pool` at `idx` that are not whole (none for a resident pool)."""
    failed: dict[str, str] = {}
    if pool.resident:
        return failed
    for i in idx:
        try:
            check_image(pool.encoded(int(i)), pool.origin(int(i)))
        except CorruptImage as e:
            failed[e.origin] = e.reason
    return failed


def _work(idx: np.ndarray) -> dict[str, str]:
    return check_indices(_WORKER["pool"], idx)


def check_pool(pool: Pool, idx: np.ndarray, workers: int = 0) -> dict[str, str]:
    """check_indices over `workers` spawned processes (0: here), in chunks of CHUNK images; failures in order."""
    if workers <= 0 or pool.resident or len(idx) <= CHUNK:
        return check_indices(pool, idx)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    chunks = [idx[i:i + CHUNK] for i in range(0, len(idx), CHUNK)]
    failed: dict[str, str] = {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker, initargs=(pool,)) as ex:
        for part in ex.map(_work, chunks):
            failed.update(part)
    return failed


def check_splits(splits) -> None:
    """Verify the images of `splits` (vitbench.transfer.data.Splits) once per pool. Corrupt files: a ConfigError
    (exit 2) naming the first and counting them, unless data.skip_corrupt, then counted as skipped from the
    start (the row's skipped_files and the terminal say how many)."""
    by_pool: dict[int, tuple[Pool, list[np.ndarray]]] = {}
    for part in (splits.train, splits.val, splits.test):
        by_pool.setdefault(id(part.pool), (part.pool, []))[1].append(part.index)
    failed: dict[str, str] = {}
    for pool, parts in by_pool.values():
        failed.update(check_pool(pool, np.unique(np.concatenate(parts)), splits.train.workers))
    if not failed:
        return
    if not splits.skipped.allowed:
        origin, reason = next(iter(failed.items()))
        raise ConfigError(f"--check-data: {len(failed)} corrupt files in {splits.source}; the first: "
                          f"{CorruptImage(origin, reason)}")
    splits.skipped.files.update(failed)
