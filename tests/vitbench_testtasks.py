"""Test-only tasks (registered when imported; children import this module by name).

Use from a sweep subprocess with VITBENCH_TASK_MODULES=vitbench_testtasks and tests/ on PYTHONPATH.
"""

from __future__ import annotations

import os
import time

from vitbench.record import make_record, now
from vitbench.trial import register_task

FIELDS = ("model", "backend", "task", "device", "resolution", "batch_size", "seed")


def _sleep(config: dict) -> dict:
    """Sleeps `seconds`; behaviour: ok | crash (exception) | abort (process dies) | oom | hang."""
    started = now()
    b = config["behaviour"]
    print(f"fake task {config['model']} behaviour={b}", flush=True)
    if b == "crash":
        raise RuntimeError("deliberate failure from the test task")
    if b == "abort":
        os.abort()
    if b == "oom":
        raise MemoryError("CUDA out of memory (simulated)")
    if b == "hang":
        time.sleep(3600)
    t0 = time.perf_counter()
    steps = []
    for _ in range(3):
        s0 = time.perf_counter()
        time.sleep(config["seconds"] / 3)
        steps.append(time.perf_counter() - s0)
    el = time.perf_counter() - t0
    batch = config["batch_size"]
    metrics = {"img_per_s": 3 * batch / el, "step_ms_median": sorted(steps)[1] * 1e3,
               "batch_size_achieved": batch, "pid": os.getpid()}
    return make_record("bench", dict(config), metrics=metrics, raw={"step_s": steps}, started_at=started)


register_task("sleep", _sleep, kind="bench", fields=FIELDS,
              params={"seconds": (float, 0.05), "behaviour": (str, "ok")}, description="test-only")


def _spawner(config: dict) -> dict:
    """Starts a grandchild that would outlive the trial, prints its pid, then hangs (for timeout tests)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"grandchild {p.pid}", flush=True)
    time.sleep(3600)
    return {}


register_task("spawner", _spawner, kind="bench", fields=FIELDS, description="test-only")
