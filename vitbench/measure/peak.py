"""The device's measured dense-matmul peak (FLOP/s), cached per machine: the denominator of MFU.

A measured peak (not a datasheet number) keeps MFU honest on any machine, including this CPU. The cache keeps the
best reading (`vitbench env --refresh` re-measures and only ever raises it), so a busy machine cannot lower it. The cache lives in
$VITBENCH_CACHE_DIR or $XDG_CACHE_HOME/vitbench (default ~/.cache/vitbench)/peak.json, keyed by machine, backend,
device, precision and threads.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from vitbench.env import machine_id


def cache_dir() -> Path:
    base = os.environ.get("VITBENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vitbench")
    return Path(base)


def _key(backend_name: str, device: str, precision: str, threads: int | None) -> str:
    return f"{machine_id()}|{backend_name}|{device}|{precision}|threads={threads}"


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def matmul_peak(backend, precision: str = "fp32", device: str = "cpu", threads: int | None = None,
                refresh: bool = False, seconds: float = 1.0) -> dict:
    """Return {'peak_tflops': ..., 'measured_at': ..., 'cached': bool} for an already set-up backend."""
    path = cache_dir() / "peak.json"
    key = _key(backend.name, device, precision, threads)
    cache = _load(path)
    if not refresh and key in cache:
        return {**cache[key], "cached": True}
    flops = backend.matmul_flops_per_s(precision, seconds=seconds)
    entry = {"peak_tflops": flops / 1e12, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "key": key}
    old = cache.get(key)
    if old and old.get("peak_tflops", 0) > entry["peak_tflops"]:
        # A peak is the best the device has shown: a re-measurement on a busy machine must not lower it
        # (MFU would then exceed 1). The latest reading is kept beside it for inspection.
        entry = {**old, "last_tflops": entry["peak_tflops"], "last_measured_at": entry["measured_at"]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache = _load(path)
        cache[key] = entry
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache, indent=1))
        os.replace(tmp, path)  # atomic: concurrent runs never see a half-written cache
    except OSError:
        pass  # a read-only home is no reason to fail a measurement
    return {**entry, "cached": False}
