"""Shared CLI helpers: consoles and JSON output."""

from __future__ import annotations

import json
import sys

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
