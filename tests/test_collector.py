"""The garbage collector during a measurement's timed steps: a trial forked from its backend's fork server collects
as a plain process does (no more full collections), whatever its set-up did with the collector before.

CPython runs a full collection only when the objects that survived young collections since the last full one
exceed a quarter of those the last one kept (long_lived_pending > long_lived_total / 4). So anything that makes
the last full collection before the timed steps see fewer objects than a plain process holds (e.g. the server's
imports frozen with gc.freeze(), which a full collection then skips) makes full collections more frequent inside
the timed steps: not the collector rhythm of a user's own training loop. The count is read in a loop that runs at
the start of the timed steps (in the steps' place, before them) and makes cyclic garbage, which drives young
collections, while keeping a few objects (1000: far below a quarter of what a process with torch imported
holds, far above a quarter of what it holds outside frozen imports).
"""

from __future__ import annotations

import gc
import multiprocessing as mp

import pytest

from vitbench import forkservers

BACKEND = "torch"
LOOP = 300_000  # cyclic garbage made by the counted loop: ~430 young collections, so ~40 chances of a full one
KEPT_EVERY = 300  # one object kept per this many: 1000 survivors


def _count_full_collections() -> int:
    n = [0]

    def count(phase, info):
        n[0] += phase == "stop" and info["generation"] == 2

    gc.callbacks.append(count)
    try:
        kept = []
        for i in range(LOOP):
            a = []
            a.append(a)
            if i % KEPT_EVERY == 0:
                kept.append([])
    finally:
        gc.callbacks.remove(count)
    return n[0]


def _measure(queue, freeze_at_restart: bool) -> None:
    """A tiny bench through vitbench's own path; the counted loop runs where the timed steps start."""
    from vitbench.backends.base import Step, StopRule, get_backend
    from vitbench.measure.throughput import bench

    be = get_backend(BACKEND)
    counted = []
    restart, windows = be.restart_peak_memory, be.time_windows

    def restart_peak_memory(*a, **k):
        if freeze_at_restart:  # the control: the collector as a frozen server's imports would leave it
            gc.freeze()
        return restart(*a, **k)

    def time_windows(*a, **k):
        counted.append(_count_full_collections())
        return windows(*a, **k)

    be.restart_peak_memory, be.time_windows = restart_peak_memory, time_windows
    rec = bench(Step("ViT-Nano/4", "infer", batch_size=2, resolution=16), be, threads=1, warmup_steps=1,
                stop=StopRule(min_steps=1, min_seconds=0.01, max_seconds=1), with_mfu=False)
    assert rec.status == "ok", rec.error
    queue.put(counted[0])


def _run(proc, queue) -> int:
    proc.start()
    proc.join(timeout=300)
    assert proc.exitcode == 0
    return queue.get(timeout=10)


@pytest.mark.timeout(600)
@pytest.mark.skipif(forkservers.unavailable is not None, reason=str(forkservers.unavailable))
def test_the_timed_steps_of_a_forked_trial_collect_as_in_a_plain_process():
    pytest.importorskip(BACKEND)
    from vitbench.executors.local import PRELOAD
    from vitbench.registry import Kind, entries

    preload = (*PRELOAD, *entries(Kind.BACKEND)[BACKEND].obj.preload)  # the sweep's server for this backend
    q = mp.get_context("spawn").Queue()
    plain = _run(mp.get_context("spawn").Process(target=_measure, args=(q, False)), q)
    forked = _run(forkservers.process(preload, _measure, (q, False)), q)
    frozen = _run(forkservers.process(preload, _measure, (q, True)), q)
    assert forked == plain
    assert frozen > plain  # the count sees a collector left with few long-lived objects
