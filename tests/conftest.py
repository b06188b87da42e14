"""Shared test setup: a private cache dir (matmul peak) so tests never touch ~/.cache, a quick peak measurement
(inherited by trial processes), no inherited output width, and a CLI runner."""

from __future__ import annotations

import os
import signal

import pytest

# A test run started in the background from a script inherits SIGINT ignored (POSIX shells do that; Python keeps
# it), and so would every process the tests start: a local SLURM job cancelled by SIGINT (submitit's local
# cancel) then keeps running. `vitbench` itself restores the default at start (vitbench.cli.main); the tests call
# the library in-process, so they do the same here.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# XLA's CPU compiles without LLVM's optimisation passes in tests (inherited by every process a test starts): the
# tests check what vitbench does on tiny models, whose XLA compiles, not their runs, took most of the JAX tests'
# time (R-Nano's jitted init 10-17 s here). Measured on this 2-core machine, quiet, `pytest -n 2` of
# test_precision_policy, test_transfer_jax and test_axial: 210 s -> 131 s wall, 399 s -> 244 s CPU, all passing.
# Tests only: what vitbench measures (benchmarks, .ci/speed-check, a user's runs) keeps XLA's defaults.
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join([_flags, *(f for f in TEST_XLA_FLAGS if f.split("=")[0] not in _flags)]).strip()

# Small matrices, short timing: a measured peak in tests costs a fraction of a second per backend.
QUICK_PEAK = '{"cpu_sizes": [128, 256], "seconds": 0.05}'


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in ("VITBENCH_CACHE_DIR", "VITBENCH_PEAK_POLICY", "COLUMNS", "LINES")}
    os.environ["VITBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("vitbench-cache"))
    os.environ["VITBENCH_PEAK_POLICY"] = QUICK_PEAK
    # output width as where no terminal is attached (vitbench.cli.common): pytest-xdist's workers get COLUMNS=80
    # from xdist, a developer's shell may export its own; a test that wants a width sets COLUMNS itself
    for k in ("COLUMNS", "LINES"):
        os.environ.pop(k, None)
    yield
    for k, old in saved.items():
        if old is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = old


@pytest.fixture
def cli():
    """Invoke the vitbench CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from vitbench.cli import app

    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args])

    return invoke


@pytest.fixture
def scratch_registry():
    """The registry's entries as they are, restored after the test (a toy plug-in leaves nothing behind: the
    model table, the override keys and `vitbench models` read the families from it)."""
    from vitbench.registry import _STATE, Kind, load_plugins

    load_plugins()
    saved = {k: dict(v) for k, v in _STATE.entries.items()}
    yield
    for kind in Kind:
        _STATE.entries[kind].clear()
        _STATE.entries[kind].update(saved.get(kind, {}))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models train as fast on one thread and do not stall when other jobs load the CPU; restored after."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
