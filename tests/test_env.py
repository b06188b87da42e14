"""The environment a row carries, vitbench's version, and drift of installed packages from the lock."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

from vitbench.env import lock_differences, parse_lock


def test_version_flag(cli):
    r = cli("--version")
    assert r.exit_code == 0
    assert r.stdout.startswith(f"vitbench {metadata.version('vitbench')}")


def test_python_dash_m_vitbench_is_the_command(tmp_path):
    """`python -m vitbench` (an interpreter whose scripts are not on PATH): "No module named vitbench.__main__"."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "vitbench", "--version"], capture_output=True, text=True,
                       cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo)}, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("vitbench "), (r.stdout, r.stderr)


def test_version_flag_from_a_source_tree_without_an_install(cli, monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.startswith("vitbench not installed")


def test_lock_differences_name_what_moved():
    numpy = metadata.version("numpy")
    lock = (f"# a comment\nNumPy=={numpy}+cpu\npydantic==0.0.1  # moved\n"
            "no-such-package-anywhere==1.0\n")
    differ, missing = lock_differences(lock)
    assert differ == [("pydantic", metadata.version("pydantic"), "0.0.1")]  # local label ignored for numpy
    assert missing == ["no-such-package-anywhere"]


def test_shipped_lock_pins_every_declared_dependency():
    """scripts/lock.sh must be re-run when a dependency is added: every requirement of vitbench[all] is locked."""
    from importlib import resources

    locked = parse_lock(resources.files("vitbench").joinpath("requirements.lock").read_text())
    names = {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in metadata.requires("vitbench") or []}
    names = {re.sub(r"[-_.]+", "-", n).lower() for n in names} - {"vitbench"}
    assert names and not names - set(locked), f"not in the lock: {sorted(names - set(locked))}"


def test_env_reports_lock_drift(cli):
    r = cli("env", "--json")
    assert r.exit_code == 0, r.output
    import json

    doc = json.loads(r.stdout)
    assert set(doc["lock"]) == {"differ", "not_installed"}
    assert doc["env"]["deps"]


def _refused_on_cpu(backend: str) -> list[str]:
    from vitbench.backends.base import backend_spec

    spec = backend_spec(backend)
    return [p for p in spec.precisions if spec.problems({"precision": p, "device": "cpu"})]


@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.jax)])
def test_env_refuses_a_precision_the_device_lacks_as_bench_does(cli, backend):
    """`env --precision P` on a device without P (tf32 on a CPU): exit 2 and, word for word, bench's message
    (one function words both: vitbench.cli.common.refuse_unsupported), before the backend starts."""
    if backend == "jax":
        pytest.importorskip("jax")
    refused = _refused_on_cpu(backend)
    assert "tf32" in refused  # no tensor cores on a CPU: the case of issue 30
    for precision in refused:
        env = cli("env", "--backend", backend, "--device", "cpu", "--precision", precision)
        bench = cli("bench", "ViT-Nano/4", "--backend", backend, "--device", "cpu", "--precision", precision)
        assert env.exit_code == bench.exit_code == 2, (env.output, bench.output)
        assert "--precision" in env.output and env.output == bench.output
        assert "Traceback" not in env.output
