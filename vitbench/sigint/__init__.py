"""Ctrl-C while a fork server imports its preload list (vitbench.forkservers): imported first in the list, this
module ignores SIGINT in the server; `vitbench.sigint.restore`, imported last, gives it back Python's own handler.

CPython's fork server (multiprocessing.forkserver.main) imports its preload list with SIGINT at its default, and
ignores it only afterwards. A Ctrl-C in those seconds (torch, timm or JAX being imported) ended the server with a
KeyboardInterrupt traceback of 40-50 lines, after the command itself had said one line (`vitbench max-batch` or a
sweep interrupted in its first seconds: session 31). The command that started the server handles the Ctrl-C
(exit 130, its children ended); the server needs only to stay quiet. CPython then ignores SIGINT in the server
and restores, in each child it forks, the handler in force before it did: the one `restore` put back, so a child
(a trial, a probe) is interrupted as any Python process is."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
