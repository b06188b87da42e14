"""Imported once by the local executor's fork server (vitbench.executors.local.PRELOAD): does what every trial
would otherwise do again at its start and what does not change during a sweep, so each trial forked from the
server finds it done:

- the plug-ins registered (vitbench.registry.load_plugins: every kind's built-in modules, the entry points and
  $VITBENCH_PLUGINS; a trial otherwise read every installed package's entry points and imported the plug-in
  modules its task, model family and backend needed: 30-70 ms per trial);
- what every row records about this installation and machine, cached (functools.lru_cache): the lock check (it
  reads every installed package's metadata: 0.1-0.6 s), the CPU model, the git SHA as the sweep started;
- the hash of vitbench's source that keys the value cache (vitbench.value_cache.source_hash, lru_cached: it reads
  every .py file of the package, ~20 ms per trial otherwise), as the server started, like the git SHA.

A plug-in that fails to import is left for the trial that needs it to report (the sweep has already said why when
it read the study: it loads the plug-ins first); the server itself must start.
"""

import contextlib

from vitbench.env import cpu_model, git_sha, lock_status
from vitbench.errors import VitbenchError
from vitbench.registry import load_plugins
from vitbench.value_cache import source_hash

with contextlib.suppress(VitbenchError):
    load_plugins()
lock_status()
cpu_model()
git_sha()
source_hash()
