"""Fixtures and helpers shared by the executor and reliability tests (import the fixtures into a test module).

One Ray session serves every test of a module that asks for it (starting Ray costs seconds); it is started
lazily by the first such test and shut down after the module. Workers (submitit's job processes, Ray workers,
and the trial children they spawn) find the test-only task modules through PYTHONPATH, set before they start.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TASK_MODULES = "vitbench_testtasks,vitbench_hogtasks"


def _pythonpath() -> str:
    return os.pathsep.join(p for p in [str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")] if p)


def subprocess_env() -> dict:
    """Environment for a `vitbench sweep` subprocess that can run the test-only tasks."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _pythonpath()
    env["VITBENCH_PLUGINS"] = TASK_MODULES
    return env


@pytest.fixture
def worker_env(monkeypatch):
    """Job processes started from this test process import the test-only tasks."""
    monkeypatch.setenv("PYTHONPATH", _pythonpath())
    monkeypatch.setenv("VITBENCH_PLUGINS", TASK_MODULES)


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray instance (2 CPUs, no dashboard) for the Ray tests of a module; workers see the test-only
    tasks. Module scope: Ray's processes and memory do not linger into other modules' tests (max-batch budgets
    are a share of the free memory)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # opened by someone else: use it, leave it open
        yield ray
        return
    old = {k: os.environ.get(k) for k in ("PYTHONPATH", "VITBENCH_PLUGINS")}
    os.environ["PYTHONPATH"] = _pythonpath()  # inherited by the raylet and so by every worker
    os.environ["VITBENCH_PLUGINS"] = TASK_MODULES
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        yield ray
    finally:
        ray.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_study(path: Path, body: str, name: str = "rel") -> Path:
    path.write_text(f"name: {name}\ncalibration: false\n" + textwrap.dedent(body))
    return path


def sweep_cmd(study: Path, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", "from vitbench.cli import main; main()", "sweep", str(study),
            "--results", str(results), "--start-method", "spawn", *extra]


def run_sweep(study: Path, results: Path, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_cmd(study, results, *extra), env=subprocess_env(), capture_output=True,
                          timeout=timeout)


def ran(stdout: bytes) -> int:
    m = re.search(r"ran (\d+) trial", " ".join(stdout.decode().split()))
    assert m, stdout.decode()
    return int(m.group(1))


def wait_for(cond, timeout: float = 60.0, what: str = "condition", every: float = 0.05) -> None:
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def rows_on_disk(results: Path) -> int:
    """Newline-terminated lines in every results*.jsonl of a store (finished rows, torn ones excluded)."""
    return sum(f.read_bytes().count(b"\n") for f in results.glob("results*.jsonl")) if results.is_dir() else 0
