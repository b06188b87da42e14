#!/usr/bin/env python3
"""Fail when a cluster service listens beyond loopback (.ci/run runs it after scripts/cluster/up.sh).

    scripts/cluster/check_listeners.py [--pids $CLUSTER_DIR/pids] [--ss-output FILE]

Reads `ss -ltnup` (TCP and UDP sockets listening, with their processes; run as root to see every process), keeps
the sockets of the cluster's processes (the pids up.sh wrote and all their descendants) when `--pids` is given,
and exits 1 naming each one bound to a non-loopback address (`0.0.0.0`, `*`, `[::]`, a routed address), 0 when
every one is on loopback (127.0.0.0/8, ::1, ::ffff:127.x). `--ss-output` reads a saved `ss -ltnup` instead
(the tests give it fake outputs). Sockets without a process (another namespace's) are not the cluster's.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_PID = re.compile(r'\("([^"]*)",pid=(\d+)')


@dataclass(frozen=True)
class Listener:
    proto: str
    address: str  # as ss prints it: 0.0.0.0, *, [::ffff:127.0.0.1], 127.0.0.53%lo
    port: str
    processes: tuple[tuple[str, int], ...]  # (name, pid) of each process holding the socket

    def __str__(self) -> str:
        who = ", ".join(f"{n} (pid {p})" for n, p in self.processes) or "no process shown"
        return f"{self.proto} {self.address}:{self.port} by {who}"


def parse(ss_output: str) -> list[Listener]:
    """The listening sockets in `ss -ltnup` output (its header line skipped)."""
    out = []
    for line in ss_output.splitlines():
        f = line.split()
        if len(f) < 5 or f[0] not in ("tcp", "udp"):
            continue
        local = f[4]
        address, _, port = local.rpartition(":")
        out.append(Listener(f[0], address, port, tuple((n, int(p)) for n, p in _PID.findall(line))))
    return out


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or an IPv4-mapped loopback; `*` (every interface) and anything else are not."""
    host = address.strip("[]").split("%")[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # '*': all interfaces
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def descendants(pids: set[int]) -> set[int]:
    """`pids` and every process below them (now)."""
    import psutil

    found = set(pids)
    for pid in pids:
        try:
            found |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            pass
    return found


def owned_by(listeners: list[Listener], owned: set[int] | None) -> list[Listener]:
    """The listeners held by one of the `owned` processes (None: all of them)."""
    return [x for x in listeners if owned is None or any(p in owned for _, p in x.processes)]


def offenders(listeners: list[Listener], owned: set[int] | None) -> list[Listener]:
    """The listeners on a non-loopback address, among those of the `owned` processes (None: all)."""
    return [x for x in owned_by(listeners, owned) if not is_loopback(x.address)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pids", type=Path, help="up.sh's pid file ($CLUSTER_DIR/pids): only these processes' sockets")
    ap.add_argument("--ss-output", type=Path, help="a saved `ss -ltnup` output instead of running ss")
    a = ap.parse_args(argv)
    text = a.ss_output.read_text() if a.ss_output else subprocess.run(
        ["ss", "-ltnup"], capture_output=True, text=True, check=True).stdout
    owned = None
    if a.pids:
        owned = descendants({int(line.split()[0]) for line in a.pids.read_text().splitlines() if line.strip()})
    listeners = parse(text)
    bad = offenders(listeners, owned)
    for x in bad:
        print(f"check_listeners: listening beyond loopback: {x}", file=sys.stderr)
    if not bad:
        print(f"check_listeners: {len(owned_by(listeners, owned))} listening socket(s), all on loopback")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
