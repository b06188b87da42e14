"""Shared test setup: a private cache dir (matmul peak) so tests never touch ~/.cache, and a CLI runner."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    old = os.environ.get("VITBENCH_CACHE_DIR")
    os.environ["VITBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("vitbench-cache"))
    yield
    if old is None:
        os.environ.pop("VITBENCH_CACHE_DIR", None)
    else:
        os.environ["VITBENCH_CACHE_DIR"] = old


@pytest.fixture
def cli():
    """Invoke the vitbench CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from vitbench.cli import app

    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args])

    return invoke


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models train as fast on one thread and do not stall when other jobs load the CPU; restored after."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
