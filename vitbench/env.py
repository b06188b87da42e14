"""The environment a record was measured in: versions, device, CPU model, threads, git SHA."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def git_sha(path: str | None = None) -> str | None:
    """SHA of the checkout vitbench runs from (if any), with '-dirty' when it has uncommitted changes."""
    where = path or str(Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        if not sha:
            return None
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def machine_id() -> str:
    """A stable name for this machine + CPU, used to cache the measured matmul peak."""
    return f"{socket.gethostname()}|{cpu_model()}|{os.cpu_count()}"


def environment(backend_info: dict | None = None) -> dict:
    """Everything needed to compare two records honestly. `backend_info` adds device/threads/versions."""
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "vitbench": _version("vitbench"),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "timm": _version("timm"),
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "flax": _version("flax"),
        "git_sha": git_sha(),
    }
    if backend_info:
        env.update(backend_info)
    return env
