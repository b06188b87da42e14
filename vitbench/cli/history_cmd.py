"""`vitbench history`: the speed of a project over its commits, with change points (docs/history.md); `vitbench
history append RESULTS_DIR` records a sweep's or an ab run's results. Thin over vitbench.history."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, err_console, print_json
from vitbench.cli.options import cli_option, from_constant
from vitbench.env import short_sha
from vitbench.errors import ConfigError, clip
from vitbench.history import DEFAULT_PATH, HISTORY_ENV
from vitbench.numfmt import percent

_FORMATS = ("table", "json")
EXIT_NEW_REGRESSION = 1  # a regression change point the newest commit brought to light (docs/history.md)

history_app = typer.Typer(invoke_without_command=True, no_args_is_help=False, rich_markup_mode=None,
                          add_completion=False)
app.add_typer(history_app, name="history")

_DB_HELP = (f"The history file (SQLite). Default: ${HISTORY_ENV}, else {DEFAULT_PATH}, relative to the "
            "current directory: beside the repository when run from its top (as CI does), inside the checkout "
            "when run from a subfolder.")


@history_app.callback()
def history_cmd(
    ctx: typer.Context,
    db: str = typer.Option(None, "--db", metavar="PATH", help=_DB_HELP),
    metric: list[str] = typer.Option(None, "--metric", "-m", metavar="METRIC",
                                     help="Metric to show (repeatable): any metric a task declares comparable, "
                                          "or the paired ratio an `ab` run records against its baseline "
                                          "commit (default: every recorded one)."),
    confidence: float = from_constant("vitbench.compare.decide", "DEFAULT_CONFIDENCE",
                                      help="Confidence a change point needs to count as a new regression "
                                           "(exit 1)."),
    fmt: str = cli_option("format", "--format", help="table | json (the series and their change points)."),
    html: str = typer.Option(None, "--html", metavar="OUT",
                             help="Also write the history page to OUT (one self-contained .html file: a chart "
                                  "per metric, change points marked); a file vitbench did not write is never "
                                  "replaced."),
) -> None:
    """Per metric and trial, the series over commits and its change points (size, confidence, commit range).

    Change points: binary segmentation on the log values with a penalty from the series' own noise
    (docs/history.md, chosen by benchmarks/bench_history.py); normalised by each machine's calibration where the
    machine changed.

    Exit code: 0 = no new regression; 1 = a regression change point (at --confidence) that the history without
    its newest commit does not show; 2 = bad input (a missing or foreign --db, an unknown metric, bad option).
    """
    if ctx.invoked_subcommand is not None:
        if any(v is not None for v in (db, metric or None, html)):
            raise ConfigError("`vitbench history --db/--metric/--html ... append`: give append its own options "
                              "after the word append (vitbench history append RESULTS_DIR --db PATH)")
        return
    from vitbench.cli.common import choice
    from vitbench.compare.decide import check_gate
    from vitbench.history import series as hs
    from vitbench.history import store

    choice(fmt, _FORMATS, "--format")
    check_gate(None, confidence, zero_threshold=False)
    known = _metrics()
    unknown = [m for m in metric or () if m not in known]
    if unknown:
        raise ConfigError(f"--metric {clip(', '.join(unknown), 200)}: unknown; allowed: {', '.join(known)}")
    out = None
    if html is not None:
        from vitbench.paths import check_file

        out = check_file(html, "--html")  # a file name; the page never replaces a file it did not write
    path = store.default_path(db)
    series = hs.detect(hs.build(list(store.read(path)), tuple(metric or ())))
    if not series:
        raise ConfigError(f"--db {path}: no recorded points" + (f" of {', '.join(metric)}" if metric else ""))
    new = {id(s): hs.new_regressions(s, confidence) for s in series}
    if out is not None:
        _page(hs.to_page(series), out)
    if fmt == "json":
        doc = hs.to_page(series)
        for d, s in zip(doc, series):
            d["basis"] = s.basis
            d["new_regressions"] = [c.index for c in new[id(s)]]
        print_json({"db": str(path), "series": doc})
    else:
        _table(series, new, path)
    n_new = sum(len(v) for v in new.values())
    if n_new:
        err_console.print(f"history: {n_new} new regression change point(s) at confidence >= "
                          f"{percent(confidence)}", highlight=False)
        raise typer.Exit(EXIT_NEW_REGRESSION)


def _metrics() -> tuple[str, ...]:
    from vitbench.compare import metrics
    from vitbench.compare.ab import METRIC
    from vitbench.history.collect import PAIRED_SUFFIX

    return (*metrics(), METRIC + PAIRED_SUFFIX)


def _page(doc: list[dict], out) -> None:
    import importlib
    import importlib.util

    if importlib.util.find_spec("vitbench.history.page") is None:
        raise ConfigError("--html: the history page (vitbench.history.page) is not part of this vitbench yet")
    page = importlib.import_module("vitbench.history.page")
    written = page.render(doc, out)
    err_console.print(f"history page: {escape(str(written))}", highlight=False)


def _table(series, new, path) -> None:
    from vitbench.history.series import AT_LEAST, legend
    from vitbench.report.caveats import MARK

    t = Table(title=f"history {escape(str(path))}", title_justify="left")
    for col in ("metric", "trial", "commits", "newest", "change points (size, confidence, commits)"):
        t.add_column(col, overflow="fold")
    marked = 0
    for s in series:
        cps = []
        flagged = {i for i, w in enumerate(s.caveats) if w.startswith(MARK)}
        marked += len(flagged)
        for c in s.changes:
            first, last = s.commit_range(c)
            mark = " NEW REGRESSION" if c in new[id(s)] else ""
            if flagged & set(range(max(c.first - 1, 0), c.last + 1)):  # the commits it lies between
                mark += f" {MARK} beside a marked point"
            if s.across_machines(c):  # (never a new regression: hs.new_regressions)
                mark += f" {MARK} the machine changed here too (no calibration to normalise by)"
            # to 0.1 %: the permutation test resolves 0.001 (history.changes.PERMUTATIONS), and 0.995 read 100 %
            cps.append(f"x{c.size:.3f} ({c.confidence:.1%}) {short_sha(first)}..{short_sha(last)}{mark}")
        # the value the change points were found on: normalised, where they were (a newest commit measured on two
        # machines showed the raw median of both, labelled normalised)
        last = s.normalized[-1] if s.basis == "normalized" else s.values[-1]
        newest = (AT_LEAST if s.at_least and s.at_least[-1] else "") + f"{last:.4g} {s.unit}" + \
            (" (normalized)" if s.basis == "normalized" else "") + \
            (f" [{s.caveats[-1]}]" if s.caveats and s.caveats[-1] else "")
        t.add_row(s.metric, escape(s.trial), str(len(s.commits)), escape(newest), escape("; ".join(cps) or "none"))
    console.print(t)
    if marked:
        console.print(escape(legend(marked)), highlight=False)


@history_app.command("append")
def append_cmd(
    results_dir: str = typer.Argument(..., help="A `vitbench sweep --results` or `vitbench ab --results` "
                                                "directory."),
    db: str = typer.Option(None, "--db", metavar="PATH", help=_DB_HELP),
    commit: str = typer.Option(None, "--commit", metavar="SHA",
                               help="The commit measured (default: the rows' git_sha)."),
    repo: str = cli_option("repo", "--repo", metavar="DIR",
                           help="The git checkout the commit's date is read from."),
) -> None:
    """Append one run (a sweep's rows, or an ab run's current side with its verdict and pair ratios) to the
    history, with its commit, date, machine and calibration. Never rewrites what is there; exit 2 on bad input
    (nothing written)."""
    from vitbench.history import store
    from vitbench.history.collect import collect

    path = store.default_path(db)
    if commit is not None and (not commit.strip() or len(commit) > 200 or not commit.isprintable()):
        raise ConfigError(f"--commit {commit[:40]!r}: give a commit SHA or name (printable, at most 200 "
                          "characters)")
    if not Path(repo).expanduser().is_dir():
        raise ConfigError(f"--repo {repo}: not a directory (the git checkout the commit's date is read from)")
    store.check_db(path)  # a bad --db is named before the results are read
    run, points = collect(results_dir, commit=commit, repo=repo)
    run_id = store.append(path, run, points)
    console.print(f"history {escape(str(path))}: run {run_id} appended ({run.source}, commit "
                  f"{short_sha(run.commit)}, {len(points)} points)", highlight=False)
