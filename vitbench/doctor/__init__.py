"""`vitbench doctor`: whether this machine's numbers can be trusted and what would make them noisy. checks.py: the
per-backend checks (timing honesty, matmul precision, peak) and `run`, all of them for a device; host_checks.py:
the host's (threads, load, clocks, memory) and the `Check` every check returns. Above vitbench.measure, whose
meters and peaks it reads; only the command line imports it."""

from vitbench.doctor.checks import Status, run

__all__ = ["Status", "run"]
