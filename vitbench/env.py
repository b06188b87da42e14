"""The environment a record was measured in: versions, device, CPU model, threads, git SHA."""

from __future__ import annotations

import functools
import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata, resources
from pathlib import Path

from vitbench.errors import clip

LOCK_FILE = "requirements.lock"  # inside the package: exact versions of vitbench[all] (scripts/lock.sh)
# the commit of vitbench code run outside a git checkout, where git cannot tell it: `vitbench ab` and `bisect` set
# it for a side unpacked with `git archive` (vitbench.compare.sides), so that side's rows record their commit
GIT_SHA_ENV = "VITBENCH_GIT_SHA"
SHORT_SHA = 10  # hex digits of a commit shown for it (env.short_sha)


def distribution_version(pkg: str) -> str | None:
    """The installed version of a distribution, as its metadata says (the one source for every row)."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name: Linux's /proc/cpuinfo, macOS's sysctl machdep.cpu.brand_string (e.g. 'Apple M3 Max',
    where platform.processor() says 'arm' for every Apple chip), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                   timeout=5).stdout.strip()  # as git_sha's: a local command that answers at once
            if brand:
                return brand
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def git_sha(path: str | None = None) -> str | None:
    """SHA of the checkout vitbench runs from (if any), with '-dirty' when it has uncommitted changes; outside a
    git checkout, $VITBENCH_GIT_SHA where set (GIT_SHA_ENV), else None."""
    where = path or str(Path(__file__).resolve().parent)
    named = os.environ.get(GIT_SHA_ENV, "").strip()[:100] or None
    try:
        sha = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        if not sha:
            return named
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return named


def short_sha(sha: str) -> str:
    """A row's git_sha as a reader names it: a commit's first SHORT_SHA hex digits (what `git show` and `vitbench
    history` take), its '-dirty' kept (a dirty run of a commit is not that commit's); anything else (a
    $VITBENCH_GIT_SHA that is no SHA) clipped."""
    head = sha.removesuffix("-dirty")
    if len(head) >= SHORT_SHA and all(c in "0123456789abcdef" for c in head):
        return head[:SHORT_SHA] + sha[len(head):]
    return clip(sha, 24)


def machine_id() -> str:
    """A stable name for this machine + CPU, used to cache the measured matmul peak."""
    return f"{socket.gethostname()}|{cpu_model()}|{os.cpu_count()}"


def _canonical(name: str) -> str:
    """PEP 503 name normalisation: 'Flax_Nightly' and 'flax-nightly' are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, str]:
    """`name==version` lines of a lock file -> {canonical name: version}; comments and blanks skipped."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        name, sep, version = line.partition("==")
        if sep:
            out[_canonical(name.strip())] = version.strip()
    return out


def lock_differences(lock_text: str | None = None) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Installed distributions whose version differs from the lock, as (name, installed, locked), and the locked
    names not installed here (an extra left out). Local version labels are ignored ('2.15.0+cpu' == '2.15.0')."""
    if lock_text is None:
        lock_text = resources.files("vitbench").joinpath(LOCK_FILE).read_text()
    locked = parse_lock(lock_text)
    installed = {_canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    differ, missing = [], []
    for name, version in sorted(locked.items()):
        have = installed.get(name)
        if have is None:
            missing.append(name)
        elif have.split("+", 1)[0] != version.split("+", 1)[0]:
            differ.append((name, have, version))
    return differ, missing


@functools.lru_cache(maxsize=1)
def lock_status() -> str:
    """One line for every record's env: does this installation match vitbench's lock?"""
    try:
        differ, _ = lock_differences()
    except (OSError, ValueError):
        return "no lock file"
    if not differ:
        return "matches the lock"
    shown = ", ".join(f"{n} {have} (lock {want})" for n, have, want in differ[:5])
    return f"{len(differ)} differ from the lock: {shown}" + (", ..." if len(differ) > 5 else "")


def backend_distributions() -> tuple[str, ...]:
    """Every registered backend's packages (e.g. torch, jax, flax), in backend order: what the environment
    records and what a report or comparison shows of it. Read from the registry (each entry's descriptor, a
    vitbench.backends.BackendSpec, lists its `distributions`), so this module imports nothing above it."""
    from vitbench.registry import Kind, entries

    # once each: the runtimes' backends list torch too (their graphs are exported from it), and a list of
    # torch three times printed it three times in a report's header
    return tuple(dict.fromkeys(d for e in entries(Kind.BACKEND).values() for d in e.obj.distributions))


def environment(backend_info: dict | None = None) -> dict:
    """Everything needed to compare two records honestly. `backend_info` adds device/threads/versions."""
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "vitbench": distribution_version("vitbench"),
        "numpy": distribution_version("numpy"),
    }
    env.update({d: distribution_version(d) for d in backend_distributions()})  # installed or not (None)
    env.update({"git_sha": git_sha(), "deps": lock_status()})
    if backend_info:
        env.update(backend_info)
    return env
