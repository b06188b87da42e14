"""scripts/cluster/check_listeners.py (run by .ci/run after scripts/cluster/up.sh) on fake `ss -ltnup` outputs:
it names every cluster socket bound beyond loopback and passes when all are on loopback."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from cluster_fixtures import REPO

SCRIPT = REPO / "scripts" / "cluster" / "check_listeners.py"
_spec = importlib.util.spec_from_file_location("check_listeners", SCRIPT)
check = importlib.util.module_from_spec(_spec)
sys.modules["check_listeners"] = check  # (its dataclass looks its module up)
_spec.loader.exec_module(check)

HEADER = "Netid State  Recv-Q Send-Q      Local Address:Port  Peer Address:PortProcess\n"
# lines as `ss -ltnup` printed them for this cluster before its services were bound to loopback (Ray 2.60,
# SLURM 22.05) and after
BAD = [
    'tcp   LISTEN 0      4096              0.0.0.0:6819       0.0.0.0:*    users:(("slurmdbd",pid=7784,fd=6))',
    'tcp   LISTEN 0      4096                    *:6379             *:*    users:(("gcs_server",pid=8119,fd=44))',
    'tcp   LISTEN 0      128             192.0.2.2:52365      0.0.0.0:*    users:(("ray::DashboardA",pid=8335,fd=38))',
    'tcp   LISTEN 0      4096   [::ffff:192.0.2.2]:10001            *:*    users:(("python3.11",pid=8153,fd=16))',
    'tcp   LISTEN 0      4096                 [::]:36993           [::]:*    users:(("raylet",pid=8288,fd=30))',
    'udp   UNCONN 0      0                 0.0.0.0:5353       0.0.0.0:*    users:(("raylet",pid=8288,fd=31))',
]
GOOD = [
    'tcp   LISTEN 0      4096            127.0.0.1:6817       0.0.0.0:*    users:(("slurmctld",pid=1061,fd=3))',
    'tcp   LISTEN 0      4096   [::ffff:127.0.0.1]:6379             *:*    users:(("gcs_server",pid=1137,fd=44))',
    'tcp   LISTEN 0      4096                [::1]:6380          [::]:*    users:(("raylet",pid=1138,fd=9))',
    'tcp   LISTEN 0      128          127.0.0.2%lo:6400       0.0.0.0:*    users:(("raylet",pid=1138,fd=10))',
]
NOT_OURS = 'tcp   LISTEN 0      128               0.0.0.0:2024       0.0.0.0:*    users:(("sshd",pid=5,fd=3))'
NO_PROCESS = "tcp   LISTEN 0      128               0.0.0.0:2025       0.0.0.0:*"


def test_every_non_loopback_socket_is_named_and_loopback_ones_pass():
    listeners = check.parse(HEADER + "\n".join(BAD + GOOD))
    assert len(listeners) == len(BAD) + len(GOOD)
    bad = check.offenders(listeners, owned=None)
    assert [f"{x.address}:{x.port}" for x in bad] == ["0.0.0.0:6819", "*:6379", "192.0.2.2:52365",
                                                       "[::ffff:192.0.2.2]:10001", "[::]:36993", "0.0.0.0:5353"]
    assert "slurmdbd (pid 7784)" in str(bad[0])
    assert check.offenders(check.parse(HEADER + "\n".join(GOOD)), owned=None) == []


def test_only_the_cluster_processes_sockets_count_when_its_pids_are_given():
    listeners = check.parse(HEADER + "\n".join([BAD[0], GOOD[0], NOT_OURS, NO_PROCESS]))
    bad = check.offenders(listeners, owned={7784, 1061})
    assert [x.port for x in bad] == ["6819"]  # not sshd's, not a socket without a process
    assert check.offenders(listeners, owned={1061}) == []
    assert {x.port for x in check.offenders(listeners, owned=None)} == {"6819", "2024", "2025"}


@pytest.mark.parametrize("lines,rc", [(GOOD, 0), (GOOD + BAD[1:2], 1)])
def test_the_command_exits_1_naming_the_listener(tmp_path, lines, rc):
    out = tmp_path / "ss.txt"
    out.write_text(HEADER + "\n".join(lines) + "\n")
    p = subprocess.run([sys.executable, str(SCRIPT), "--ss-output", str(out)], capture_output=True, text=True,
                       env={**os.environ}, timeout=60)
    assert p.returncode == rc, p.stderr
    if rc:
        assert "*:6379 by gcs_server (pid 8119)" in p.stderr
    else:
        assert "4 listening socket(s), all on loopback" in p.stdout


def test_pids_file_covers_descendants(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pids = tmp_path / "pids"
        pids.write_text(f"{os.getpid()} tester\n")
        ss = tmp_path / "ss.txt"
        ss.write_text(HEADER + f'tcp LISTEN 0 5 0.0.0.0:7000 0.0.0.0:* users:(("python",pid={child.pid},fd=3))\n')
        p = subprocess.run([sys.executable, str(SCRIPT), "--pids", str(pids), "--ss-output", str(ss)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and f"pid {child.pid}" in p.stderr
    finally:
        child.kill()
        child.wait()
