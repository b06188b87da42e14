"""Test-only tasks (registered when imported; children import this module by name).

Use from a sweep subprocess with VITBENCH_PLUGINS=vitbench_testtasks and tests/ on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
import time

from pydantic import BaseModel

from vitbench.record import Record, now
from vitbench.tasks import Metric, Task, register_task
from vitbench.tasks.fields import CheckpointField, params_model

FRAMEWORKS = ("torch", "timm", "jax", "flax")
FIELDS = ("model", "backend", "task", "device", "resolution", "batch_size", "seed")


class Sleeping(BaseModel):
    seconds: float = 0.05
    behaviour: str = "ok"
    gate: str = ""  # behaviour gate: the file it waits for


def _sleep(config: dict) -> Record:
    """Sleeps `seconds`; behaviour: ok | crash (exception) | abort (process dies) | silent_abort (dies before
    printing anything) | sigterm (stopped from outside) | oom | hang | negative (an ok record with a step time
    below 0 ms) | gate (first waits, at most 120 s, for the file `gate`: a trial a test knows is still running,
    however slow the machine is)."""
    started = now()
    b = config["behaviour"]
    if not b.startswith("silent"):
        print(f"fake task {config['model']} behaviour={b}", flush=True)
    if b == "silent_abort":  # dies with no output at all, after the trial started
        os.abort()
    if b == "crash":
        raise RuntimeError("deliberate failure from the test task")
    if b == "abort":
        os.abort()
    if b == "sigterm":  # stopped from outside as `kill` or SLURM's scancel stop it: an interrupted trial
        import signal

        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    if b == "oom":
        raise MemoryError("CUDA out of memory (simulated)")
    if b == "hang":
        time.sleep(3600)
    if b == "gate":
        gate, t_end = config["gate"], time.time() + 120
        while gate and not os.path.exists(gate) and time.time() < t_end:
            time.sleep(0.05)
    t0 = time.perf_counter()
    steps = []
    for _ in range(3):
        s0 = time.perf_counter()
        time.sleep(config["seconds"] / 3)
        steps.append(time.perf_counter() - s0)
    el = time.perf_counter() - t0
    batch = config["batch_size"]
    metrics = {"img_per_s": 3 * batch / el,
               "step_ms_median": -1.0 if b == "negative" else sorted(steps)[1] * 1e3,
               "batch_size_achieved": batch, "pid": os.getpid(), "parent_pid": os.getppid(),
               # the frameworks this trial process has imported (what its fork server preloaded, among others)
               "frameworks": " ".join(m for m in FRAMEWORKS if m in sys.modules),
               # a default the server's imports set for JAX's GPU client (vitbench.forkservers.env_default)
               "xla_preallocate_env": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}
    return Record.measured("bench", dict(config), metrics=metrics, raw={"step_s": steps}, started_at=started)


@register_task
class Sleep(Task):
    name = "sleep"
    kind = "bench"
    Params = params_model("SleepParams", FIELDS, Sleeping)
    description = "test-only"

    def run(self, p) -> Record:
        return _sleep(p.config())


def _spawner(config: dict) -> Record:
    """Starts a grandchild that would outlive the trial, prints its pid, then hangs (for timeout tests)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"grandchild {p.pid}", flush=True)
    time.sleep(3600)
    return {}


@register_task
class Spawner(Task):
    name = "spawner"
    kind = "bench"
    Params = params_model("SpawnerParams", FIELDS)
    description = "test-only"

    def run(self, p) -> Record:
        return _spawner(p.config())


class Reading(BaseModel):
    checkpoint: CheckpointField  # a file the trial reads whole (vitbench.tasks.fields.InputFile)


@register_task
class ReadCheckpoint(Task):
    name = "read_checkpoint"
    kind = "read_checkpoint"
    Params = params_model("ReadCheckpointParams", FIELDS, Reading)
    metrics = (Metric("checkpoint_bytes", "B", True, "the size of the file it read"),)
    headline = "checkpoint_bytes"
    description = "test-only"

    def run(self, p) -> Record:
        started = now()
        size = float(len(open(p.checkpoint, "rb").read()))
        return Record.measured(self.kind, p.config(), metrics={"checkpoint_bytes": size}, started_at=started)
