"""Imported once by the local executor's fork server (vitbench.executors.local.PRELOAD): works out what every
trial's row records about this installation and machine and does not change during a sweep, so each trial forked
from the server finds it cached (functools.lru_cache) instead of paying it again: the lock check (it reads every
installed package's metadata: 0.1-0.6 s), the CPU model, the git SHA as the sweep started."""

from vitbench.env import cpu_model, git_sha, lock_status

lock_status()
cpu_model()
git_sha()
