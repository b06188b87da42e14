"""The `vitbench` command's entry point (pyproject's console script, `python -m vitbench`): Ctrl-C while it starts
(its commands' modules imported, about a second; its memory guard started) ends it with one line and exit 130
(128 + SIGINT, the shell's convention), never a traceback: a command's own handling of an interrupt (a sweep
says what it recorded) starts only once the command runs. A light module: it imports nothing of vitbench at its
top, so an interrupt at any moment lands inside its `try`."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from vitbench.cli import app, start

        start()
    except KeyboardInterrupt:
        _interrupted()
    app()


def _interrupted() -> None:
    sys.stderr.write("\ninterrupted (Ctrl-C) while vitbench was starting: nothing was run\n")
    from vitbench.errors import INTERRUPTED_EXIT  # a leaf of no imports (often imported already by then)

    raise SystemExit(INTERRUPTED_EXIT)
