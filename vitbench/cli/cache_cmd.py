"""`vitbench cache`: what the machine's cache directory holds, and removing what has gone unused
(vitbench.caches)."""

from __future__ import annotations

import datetime

from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, print_json
from vitbench.cli.options import cli_option
from vitbench.errors import ConfigError
from vitbench.numfmt import fmt


def _mib(n: int) -> str:
    return fmt(n / 2**20)


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")


@app.command("cache")
def cache_cmd(
    prune: float = cli_option("prune_days", "--prune", min=0.0, metavar="DAYS",
                              help="Remove the compile caches not opened or written to, and the cached values not "
                                   "read or written, in DAYS days (docs/measurement.md)."),
    dry_run: bool = cli_option("dry_run", "--dry-run", help="With --prune: list what would go, remove nothing."),
    as_json: bool = cli_option("json", "--json", help="The listing (and what was pruned) as JSON."),
) -> None:
    """List the cache directory ($VITBENCH_CACHE_DIR): each compile cache, each kind of cached value, their files,
    size and last use; with --prune DAYS remove what has gone unused that long (files of measurements, such as
    the matmul peaks, are never removed)."""
    from vitbench.caches import parts
    from vitbench.caches import prune as prune_caches
    from vitbench.paths import check_cache_dir, check_dir

    if dry_run and prune is None:
        raise ConfigError("--dry-run: only with --prune DAYS (it says what that prune would remove)")
    root = check_cache_dir(compiling=False)  # a file there, or one that cannot be made or read: exit 2 naming it
    if prune is not None and not dry_run:
        check_dir(root, "cache directory")  # removing from it needs it writable (a read-only one: named, exit 2)
    pruned = prune_caches(prune, root, dry_run=dry_run) if prune is not None else None
    listed = parts(root)
    if as_json:
        doc = {"cache_dir": str(root), "parts": [p.to_dict(root) for p in listed]}
        if pruned is not None:
            doc["pruned"] = {"days": prune, "dry_run": dry_run, "bytes": pruned.bytes,
                             "paths": [str(p.relative_to(root)) for p in pruned.removed],
                             "failed": [{"path": str(p.relative_to(root)), "why": why}
                                        for p, why in pruned.failed],
                             "kept": [str(p.relative_to(root)) for p in pruned.kept]}
        print_json(doc)
        return
    if pruned is not None:
        verb = "would remove" if dry_run else "removed"
        console.print(f"{verb} {len(pruned.removed)} cache entries or directories unused for {fmt(prune)} days: "
                      f"{_mib(pruned.bytes)} MiB", highlight=False)
        for p in pruned.removed[:20]:
            console.print(f"  {escape(str(p.relative_to(root)))}", highlight=False)
        if len(pruned.removed) > 20:
            console.print(f"  ... and {len(pruned.removed) - 20} more", highlight=False)
        for p, why in pruned.failed[:20]:
            console.print(f"could not remove {escape(str(p.relative_to(root)))}: {escape(why)}", highlight=False)
        if pruned.kept:
            shown = ", ".join(str(p.relative_to(root)) for p in pruned.kept[:5])
            console.print(f"kept {len(pruned.kept)} old entries not marked as vitbench's (not made by it, or by a "
                          f"vitbench before 2026-11-29): {escape(shown)}"
                          + (" ..." if len(pruned.kept) > 5 else ""),
                          highlight=False)
    t = Table(title=f"cache directory {escape(str(root))}", title_justify="left")
    for col in ("what", "kind", "files", "MiB", "last used"):
        t.add_column(col, justify="left" if col in ("what", "kind") else "right")
    for p in listed:
        t.add_row(escape(str(p.path.relative_to(root))), p.kind.value, str(p.files), _mib(p.bytes),
                  _when(p.newest))
    console.print(t if listed else f"cache directory {escape(str(root))}: empty")
