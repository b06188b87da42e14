"""Test-only task `hog`: a trial that misbehaves for real (registered on import; trial children import it by name).

behaviour:
  ok      sleeps `seconds`, returns a bench-like record with its pid
  alloc   caps its own address space at (current + budget_mib) with RLIMIT_AS, then really allocates four times
          the budget: the allocation fails (MemoryError), as a CUDA allocation past the device's memory does
  segv    dereferences NULL: the process dies by SIGSEGV without a word, like a crashing native kernel
  killed  SIGKILLs itself, as the kernel's OOM killer ends a process that over-allocates host memory
  stubborn_hang  ignores SIGTERM and sleeps forever: the timeout must escalate to SIGKILL
  grow    touches memory in 32 MiB steps up to 4 x budget_mib (never more: RLIMIT_AS caps it there), as a batch
          too large for the host does: a memory budget below that must stop it first
  ranks   launches 2 ranks (vitbench.measure.ranks) that each hold budget_mib MiB for `seconds`: the trial process
          itself stays small, its tree does not

Sweep subprocesses need tests/ on PYTHONPATH and VITBENCH_PLUGINS=vitbench_hogtasks.
"""

from __future__ import annotations

import os
import signal
import time

from pydantic import BaseModel

from vitbench.record import Record, now
from vitbench.tasks import Task, register_task
from vitbench.tasks.fields import params_model

FIELDS = ("model", "backend", "task", "device", "resolution", "batch_size", "seed")


def _alloc_past_budget(budget_mib: float) -> None:
    import resource

    import psutil

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    budget = int(budget_mib * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + budget, hard))
    held = []
    for _ in range(16):  # 16 x budget/4 = 4 x budget: bytearray() zero-fills (touches) every page it gets
        held.append(bytearray(budget // 4))
    raise AssertionError(f"allocated {len(held)} chunks past the budget: RLIMIT_AS was not enforced")


def _grow(budget_mib: float) -> None:
    import resource

    import psutil

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = int(4 * budget_mib * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + cap + (256 << 20), hard))
    held = []
    while len(held) * (32 << 20) < cap:
        held.append(bytearray(32 << 20))  # zero-filled: every page touched, so resident
        time.sleep(0.02)
    raise AssertionError(f"grew to {len(held) * 32} MiB and was not stopped")


class Misbehaviour(BaseModel):
    behaviour: str = "ok"
    budget_mib: float = 64.0
    seconds: float = 0.05


@register_task
class Hog(Task):
    name = "hog"
    kind = "bench"
    Params = params_model("HogParams", FIELDS, Misbehaviour)
    description = "test-only: misbehaving trials"

    def run(self, p) -> Record:
        return _hog(p.config())


def _hog(config: dict) -> Record:
    started = now()
    b = config["behaviour"]
    if b == "stubborn_hang":  # before the line tests wait for: a SIGTERM after it must find it ignored
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"hog task {config['model']} behaviour={b} pid={os.getpid()}", flush=True)
    if b == "alloc":
        _alloc_past_budget(config["budget_mib"])
    elif b == "segv":
        import ctypes

        ctypes.string_at(0)
    elif b == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    elif b == "grow":
        _grow(config["budget_mib"])
    elif b == "ranks":
        from vitbench.measure.ranks import run_group

        tests = os.path.dirname(os.path.abspath(__file__))
        run_group("rank_targets:hold", {"mib": int(config["budget_mib"]), "seconds": config["seconds"]}, 2,
                  env={"PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])})
    elif b == "stubborn_hang":
        time.sleep(3600)
    elif b != "ok":
        raise ValueError(f"unknown behaviour {b!r}")
    t0 = time.perf_counter()
    time.sleep(config["seconds"])
    el = time.perf_counter() - t0
    return Record.measured("bench", dict(config), metrics={"img_per_s": config["batch_size"] / el,
                                                           "pid": os.getpid()},
                           raw={"step_s": [el]}, started_at=started)
