"""`vitbench sweep` and `vitbench report`: run a study into a results store, and summarise a store."""

from __future__ import annotations

import json
import shlex
import signal
import typing
import warnings
from pathlib import Path

import typer
from rich import box
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from vitbench.cli import app
from vitbench.cli.common import checked, choice, console, err_console, warn
from vitbench.cli.options import cli_option
from vitbench.errors import clip

_STATUS_STYLE = {"ok": "green", "oom": "yellow", "timeout": "yellow", "error": "red", "diverged": "red",
                 "interrupted": "magenta",
                 "pending": "dim", "skipped": "dim"}


def _fmt(v) -> str:
    from vitbench.numfmt import fmt

    return fmt(v)


_SHORT = {"resolution": "px", "batch_size": "batch", "repeats": "n", "precision": "prec", "backend": "backend",
          "img_per_s_min": "min", "img_per_s_max": "max", "error_message": "error"}


def _one_value(col) -> bool:
    """Every row holds the same value (blanks included: a column filled in one row of three is no caption's
    `x=...` for all, as the FLOPs table's gflops_xla was, while its fvcore and ONNX columns vanished)."""
    blank = col.isna()
    return bool(blank.all() or (not blank.any() and col.astype(str).nunique() == 1))


def _df_table(df, title: str, columns: list[str] | None = None, max_rows: int = 40,
              collapse: bool = True) -> Table:
    """A DataFrame as a compact rich table: columns equal in every row move to the caption."""
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    same = [c for c in cols if collapse and c != "model" and len(df) > 1 and _one_value(df[c])]
    cols = [c for c in cols if c not in same]
    caption = ", ".join(f"{c}={_fmt(df[c].iloc[0])}" for c in same if _fmt(df[c].iloc[0]))
    t = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
              caption=(f"every row: {caption}" if caption else None), caption_justify="left")
    for c in cols:
        numeric = str(df[c].dtype) not in ("object", "string", "str", "bool", "boolean")
        t.add_column(_SHORT.get(c, c), justify="right" if numeric else "left",
                     overflow="fold", no_wrap=c in ("model", "status"))
    for _, row in df[cols].head(max_rows).iterrows():
        cells = []
        for c in cols:
            s = _fmt(row[c])
            cells.append(f"[{_STATUS_STYLE[s]}]{s}[/]" if c == "status" and s in _STATUS_STYLE else escape(s))
        t.add_row(*cells)
    if len(df) > max_rows:
        t.caption = (t.caption + "; " if t.caption else "") + f"{len(df) - max_rows} more rows in the files"
    return t


def _result_line(rec) -> str:
    """One line for a finished trial: what ran, and its task's headline metric with its unit."""
    from vitbench.record import Status
    from vitbench.tasks import headline

    c = rec.measured_config
    st = rec.status.value
    bits = [c.get("model", ""), c.get("backend", ""), c.get("task", ""), c.get("device", "") if not c.get("model")
            else ""]
    if c.get("resolution"):
        bits.append(f"{c['resolution']}px")
    if c.get("batch_size"):
        bits.append(f"b{c['batch_size']}")
    if rec.repeat:
        bits.append(f"rep{rec.repeat}")
    metric = headline(rec.kind)
    if rec.status is Status.OK and metric is not None and rec.metrics.get(metric.name) is not None:
        bits.append(f"-> {_fmt(rec.metrics[metric.name])} {metric.unit}")
    what = escape(" ".join(str(b) for b in bits if b != ""))
    wall = rec.runner.get("wall_s")
    style = _STATUS_STYLE.get(st, "white")
    tail = ""
    if rec.status is not Status.OK and rec.error and rec.error.message.strip():
        tail = f" [dim]{escape(clip(rec.error.message.strip().splitlines()[0], 240))}[/]"
    return f"[{style}]{st:>11}[/] {what}" + (f" [dim]({wall:.1f} s)[/]" if wall else "") + tail


def _dry_run_table(study, statuses: dict[str, str] | None, runs: set[str] = frozenset()) -> Table:
    """The expanded trials; fields equal for every trial go into the caption to keep the table narrow. `runs`:
    the keys the command line would run (a done trial among them is re-run: --force, --retry-failed)."""
    from vitbench.record import STATUSES, Status

    names = {"model": "model", "backend": "backend", "task": "task", "device": "device", "resolution": "px",
             "batch_size": "batch", "precision": "prec", "compile": "compile", "seed": "seed"}
    seen = {f: {json.dumps(t.config[f], default=str) for t in study.trials if f in t.config} for f in names}
    same = {f: json.loads(next(iter(vals))) for f, vals in seen.items() if len(vals) == 1 and f != "model"}
    fields = {f: h for f, h in names.items() if f not in same}
    caption = ", ".join(f"{f}={_fmt(v)}" for f, v in same.items() if v is not None)
    t = Table(title=f"study {study.name}: {len(study.trials)} trials", title_justify="left", header_style="bold",
              box=box.SIMPLE_HEAD, pad_edge=False, caption=f"every trial: {caption}" if caption else None,
              caption_justify="left")
    wide = console.width >= 150
    heads = ["key", "rep", *fields.values()] + (["params"] if wide else []) + (
        ["status"] if statuses is not None else [])
    for c in heads:
        t.add_column(c, justify="right" if c in ("rep", "px", "batch", "seed") else "left",
                     no_wrap=c in ("model", "key", "task"))
    for tr in study.trials:
        c = tr.config
        row = [tr.key[:8], str(tr.repeat), *(escape(_fmt(c.get(f))) if f in c else "-" for f in fields)]
        if wide:
            row.append(escape(", ".join(f"{k}={_fmt(v)}" for k, v in c.items() if k not in names and k not in (
                "threads", "num_classes", "optimizer", "channels_last") and v is not None)))
        if statuses is not None:
            s = statuses.get(tr.key, "pending")
            again = ", runs again" if tr.key in runs and s in STATUSES and Status(s).done else ""  # --force
            row.append(f"[{_STATUS_STYLE.get(s, 'white')}]{s}[/]{again}")
        t.add_row(*row)
    return t


class _LiveHooks:
    """Progress bar with ETA plus a live line for the last result; failures stay on screen."""

    def __init__(self):
        from vitbench.runner import SweepHooks  # noqa: F401 - the protocol implemented here

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}", style="bold"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=False)
        self.last = Text("")
        self.live = Live(Group(self.progress, self.last), console=console, refresh_per_second=4)
        self.task = None
        # what this run recorded, for the line an interrupted sweep ends with: rows of finished trials and
        # calibrations, and the trials (or calibrations) recorded as interrupted
        self.trials_done = 0
        self.calibrations_done = 0
        self.interrupted: list[str] = []
        self.trials_interrupted = 0

    def planned(self, todo, summary) -> None:
        if summary.skipped_done:
            console.print(f"[dim]{summary.skipped_done} of {summary.planned} trials already done in "
                          f"{escape(str(summary.results_dir))} (resume; --force re-runs them)[/]")
        if todo:
            self.task = self.progress.add_task("starting", total=len(todo))
            self.live.start()

    def started(self, trial, job) -> None:
        if self.task is not None:
            label = trial.label() if trial is not None else job.label()
            self.progress.update(self.task, description=label)

    def finished(self, trial, rec) -> None:
        from vitbench.record import Status

        if rec.status is Status.INTERRUPTED:  # counted first: a Ctrl-C in what follows leaves it counted
            c = rec.measured_config
            self.trials_interrupted += trial is not None
            self.interrupted.append(f"{trial.label()} (key {trial.key[:8]})" if trial is not None else
                                    " ".join(str(x) for x in ("calibration", c.get("backend"), c.get("device"))
                                             if x))
        elif rec.status is not Status.SKIPPED:  # a skipped outcome is another sweep's: nothing is written
            if trial is None:
                self.calibrations_done += 1
            else:
                self.trials_done += 1
        line = _result_line(rec)
        self.last = Text.from_markup("last: " + line)
        self.live.update(Group(self.progress, self.last))
        if trial is not None and self.task is not None:
            self.progress.advance(self.task)
        if rec.status is not Status.OK:
            self.live.console.print(line)

    def stop(self) -> None:
        if self.live.is_started:
            self.live.stop()
            if not console.is_terminal:
                console.line()  # a log file gets the final render without its trailing newline

    def interrupted_line(self, out) -> str:
        """What an interrupted sweep recorded in this run: the trials it finished, the ones it recorded as
        interrupted (named), or that no trial had started and nothing was recorded (stopped during the
        calibration's start, or before the first trial's process was up)."""
        started = self.trials_done or self.trials_interrupted
        if not (started or self.calibrations_done or self.interrupted):
            return "no trial had started; nothing was recorded"
        parts = [] if started else ["no trial had started"]
        if self.trials_done:
            parts.append(f"{self.trials_done} trial(s) finished in this run are in {out}")
        if self.calibrations_done:
            parts.append(f"{self.calibrations_done} calibration(s) recorded")
        if self.interrupted:
            shown = self.interrupted[:10] + ([f"and {len(self.interrupted) - 10} more"]
                                             if len(self.interrupted) > 10 else [])
            parts.append(f"recorded as interrupted (run again next time): {', '.join(shown)}")
        elif started:
            parts.append("no trial was running, none is recorded as interrupted")
        return "; ".join(parts)


def _study_sets(sets: list[str] | None) -> dict:
    """`--set FIELD=VALUE` -> {FIELD: VALUE read as YAML (3 -> int, true -> bool, text -> str), bounded as a study
    file is (vitbench.study.reader.load_value: aliases, depth, number lengths)}."""
    from vitbench.cli.common import parse_sets
    from vitbench.errors import clip
    from vitbench.study.reader import load_value

    return {key: load_value(text, f"--set {clip(key, 80)}") for key, text in parse_sets(sets, "--set").items()}


@app.command("sweep")
def sweep_cmd(
    study: str = typer.Argument(..., help="Study YAML path, or a shipped study name (e.g. smoke)."),
    results: Path = typer.Option(None, "--results", help="Store directory (default: results/<study name>/)."),
    dry_run: bool = cli_option("dry_run", "--dry-run", help="Validate and list the expanded trials; run nothing."),
    force: bool = cli_option("force", "--force", help="Re-run trials that are already done (default: resume)."),
    retry_failed: bool = cli_option("retry_failed", "--retry-failed", help="Re-run trials whose last row is not ok."),
    executor: str = typer.Option(None, "--executor", help="Where trials run: local (default; the study may say), "
                                 "slurm (submitit) or ray. See docs/cluster.md."),
    executor_option: list[str] = typer.Option(
        None, "--executor-option", "-o", metavar="KEY=VALUE",
        help="An executor option, repeatable; overrides the study's executor.options. local: memory_limit_gib "
             "(a trial's host-memory budget), grace_s, ...; slurm: partition, gpus, time_limit_min, account, "
             "mem_gb, max_parallel, cluster=local, ...; ray: address, num_gpus, num_cpus, max_parallel, ..."),
    timeout: float = typer.Option(None, "--timeout", help="Per-trial timeout in seconds (overrides the study's "
                                  "timeout_s; at least 0.1, finite)."),
    calibration: bool = typer.Option(None, "--calibration/--no-calibration",
                                     help="Measure the device's matmul throughput first (default: the study's)."),
    start_method: str = typer.Option(None,
                                    help="local: forkserver (default: one per backend, its framework "
                                         "preloaded; on macOS spawn unless this asks for forkserver) | spawn."),
    keep_logs: bool = typer.Option(None, "--keep-logs/--no-keep-logs",
                                   help="Keep every trial's output under <results>/logs/ (not only failures')."),
    allow_failures: bool = cli_option("allow_failures", "--allow-failures",
                                      help="Exit 0 even when trials did not end ok (oom, error, timeout); "
                                      "not when one was interrupted (it was never measured)."),
    as_json: bool = cli_option("json", "--json", help="--dry-run: print the trials as JSON."),
    sets: list[str] = typer.Option(None, "--set", metavar="FIELD=VALUE",
                                   help="Set a study field in every trial (repeatable), e.g. --set "
                                        "data_path=/data/pets --set dataset=folder; VALUE is read as YAML. The "
                                        "trial keys include it; a field no trial's task reads is refused."),
) -> None:
    """Run every trial of a study, each in a fresh process with a timeout; resume what is already done.

    Results: one JSON line per trial in <results>/results.jsonl (plus the study file as run). A crash, OOM or
    timeout becomes a row saying so and the sweep goes on. Ctrl-C stops cleanly: the running trial is recorded
    as interrupted and runs again on the next sweep. Two sweeps on one directory share the work.

    Exit code: 1 when a trial's latest row is oom, error or timeout (run now or found from an earlier run;
    --allow-failures accepts them) or this run's calibration failed; 2 for bad input (nothing runs); 130 when
    interrupted; else 0.
    """
    from vitbench.cli.executor_options import executor_options
    from vitbench.errors import INTERRUPTED_EXIT, ConfigError
    from vitbench.executors import STOP_SIGNALS, executor_class, stopped_by
    from vitbench.paths import check_dir
    from vitbench.registry import Kind, names
    from vitbench.runner import (
        EXIT_FAILED,
        check_executor,
        check_results_dir,
        default_results_dir,
        plan,
        run_study,
        trial_status,
    )
    from vitbench.store import Store
    from vitbench.study import load_study

    if as_json and not dry_run:  # a sweep's output is its progress and summary, which have no JSON form
        raise ConfigError("--json applies with --dry-run (it prints the expanded trials as JSON); a sweep "
                          "prints its progress: drop --json, or add --dry-run")
    if executor is not None:
        choice(executor, names(Kind.EXECUTOR), "--executor")
    st = load_study(study, check_paths=not dry_run, sets=_study_sets(sets))
    out = (results or default_results_dir(st)).expanduser()  # as the sweep writes it: `~` read the same by all
    # --start-method and --keep-logs are executor options: passed to an executor whose options take them
    fields = executor_class(executor or st.executor.name).Options.model_fields
    if start_method is not None and "start_method" in fields:
        choice(start_method, typing.get_args(fields["start_method"].annotation), "--start-method")
    opts = {k: v for k, v in (("start_method", start_method), ("keep_logs", keep_logs)) if v is not None
            and k in fields}
    opts = executor_options(opts, executor_option or [])  # the flags, then -o (refused where they disagree)
    from vitbench.study.schema import TimeoutS
    from vitbench.tasks import row_check

    timeout = checked(timeout, TimeoutS, "--timeout")
    check_executor(st, executor, opts)  # everything is checked before anything is shown, run or written
    if results is not None:  # named as typed (run_study checks its directory again, as "results directory")
        check_dir(results, "--results")
    if dry_run:  # a sweep checks the results directory itself (run_study), before it shows anything
        store = Store(out, check=row_check())  # read as the sweep would read it
        check_results_dir(st, out, "--results", store)
        statuses = trial_status(st, store)
        with warnings.catch_warnings():  # a changed input was said by trial_status
            warnings.simplefilter("ignore")
            runs = {t.key for t in plan(st, store, force, retry_failed)}  # what this command line would run
        if as_json:
            print(json.dumps([{"key": t.key, "repeat": t.repeat, "origin": t.origin, "config": t.config,
                               **({"status": statuses.get(t.key), "runs": t.key in runs} if statuses else {})}
                              for t in st.trials], indent=1))
            if st.missing_paths:
                raise ConfigError(st.missing_paths)
            return
        console.print(_dry_run_table(st, statuses, runs))
        collapsed = st.combinations - st.unique_trials
        console.print(f"{st.unique_trials} distinct trials x up to {st.repeats} repeat(s) = {len(st.trials)}"
                      + (f"; {collapsed} combinations merged (the same trial: a value given twice, or "
                                  "fields their task ignores)" if collapsed > 0 else "")
                      + (f"; this command would run {len(runs)} of them" if statuses else "")
                      + f"; results -> {escape(str(out))}")
        if st.missing_paths:  # the trials are listed, but the study cannot run here as it is
            raise ConfigError(st.missing_paths)
        return
    hooks = _LiveHooks()
    try:
        # `kill`, a closed terminal, SLURM's preemption warning (a sweep run as a job) stop as cleanly as Ctrl-C
        with stopped_by(s for s in STOP_SIGNALS if s is not signal.SIGINT):
            summary = run_study(st, out, executor=executor, force=force, retry_failed=retry_failed,
                                calibration=calibration, timeout_s=timeout, hooks=hooks, executor_options=opts)
    except KeyboardInterrupt:
        hooks.stop()
        # --force runs every trial again, so its own command does not resume: without it, a sweep runs what has
        # no outcome yet (what this run re-ran keeps its new row, the rest their earlier one)
        again = ("Run it again without --force to run the trials with no outcome yet (the others keep their "
                 "latest one); with --force it re-runs every trial" if force else
                 "Run the same command again to resume")
        err_console.print(f"[magenta]interrupted[/]: {escape(hooks.interrupted_line(out))}. {again}.",
                          highlight=False)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    finally:
        hooks.stop()
    counts = ", ".join(f"[{_STATUS_STYLE.get(s, 'white')}]{n} {s}[/]" for s, n in sorted(summary.statuses.items()))
    console.print(f"sweep {st.name}: ran {summary.ran} trial(s) in {summary.wall_s:.1f} s"
                  + (f" ({counts})" if counts else "")
                  + (f"; {summary.skipped_done} already done" if summary.skipped_done else "")
                  + (f"; {summary.skipped_claimed} running in another sweep" if summary.skipped_claimed else "")
                  + f"\nresults: {escape(str(out))}/results.jsonl   report: vitbench report "
                  f"{escape(shlex.quote(str(out)))}")
    if not summary.succeeded:
        failed = summary.failed_trials
        by_status: dict[str, int] = {}
        for status in failed.values():
            by_status[status.value] = by_status.get(status.value, 0) + 1
        what = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
        parts = ([f"{len(failed)} of {len(st.trials)} trials did not end "
                  f"ok ({what})"] if failed else []) + (
            [f"{summary.calibrations_failed} calibration(s) failed"] if summary.calibrations_failed else [])
        # an interrupted trial was never measured: the study is not complete, whatever --allow-failures accepts
        left = [f"{summary.interrupted_trials} trial(s) interrupted (cancelled, preempted or lost with their "
                "node; the same command runs them again)"] if summary.interrupted_trials else []
        if allow_failures and parts:
            err_console.print(f"[yellow]{'; '.join(parts)}[/] (accepted: --allow-failures)", highlight=False)
        if left or not allow_failures:
            why = ("--allow-failures accepts failed trials, not interrupted ones" if left else
                   "--allow-failures accepts them") + ("; --retry-failed runs them again" if parts else "")
            err_console.print(f"[red]failed:[/] {'; '.join(left if allow_failures else parts + left)}; exit code "
                              f"{EXIT_FAILED} ({why})", highlight=False)
            raise typer.Exit(EXIT_FAILED)


@app.command("report")
def report_cmd(
    results: Path = typer.Argument(..., help="A results directory (results/<study>/) or a results .jsonl file."),
    out: Path = typer.Option(None, "--out", help="Where to write the report (default: <results>/report/)."),
    formats: str = cli_option("report_formats", "--format",
                              help="Comma-separated: md, html, csv, parquet."),
    plots: bool = cli_option("plots", "--plots/--no-plots", help="Write the PNG and SVG figures."),
    allow_other_files: bool = cli_option("allow_other_files", "--allow-other-files",
                                         help="Write into an --out holding files no report wrote: the report goes "
                                              "beside them and never touches them (a report file name one of them "
                                              "takes still stops it)."),
) -> None:
    """Summarise a results store: tables in the terminal; Markdown, HTML, CSV, Parquet files; PNG + SVG plots.

    Throughput is the median over repeats (min/max kept); plots: throughput and largest batch vs input size
    (paper Figure 12), GFLOPs vs measured speed, and accuracy vs pre-training compute with its Pareto front
    (Figure 5) when transfer results exist. Rows flagged unstable or measured beside other trials are marked
    (column caveat, red rings), never pooled with clean repeats. The report writes only files it wrote
    itself (listed with their hashes in --out's .vitbench-report.json): a file of anyone else's is never
    overwritten, and an --out holding such files is refused unless --allow-other-files.
    """
    from vitbench.paths import check_dir
    from vitbench.report import build_report, parse_formats
    from vitbench.report.tables import GROUPED_BY, unshown_keys

    if out is not None:
        check_dir(out, "--out")  # named as typed, before the results are read
        out = out.expanduser()
    rep = build_report(results.expanduser(), out, parse_formats(formats), plots=plots, allow_other_files=allow_other_files)
    for w in rep.warnings:
        warn(w)
    console.print(f"[bold]{escape(rep.title)}[/]")
    for m in rep.meta:
        console.print(f"  {escape(m)}", highlight=False)
    for name, df in rep.tables.items():
        if not df.empty:
            cols = rep.columns.get(name)
            split = unshown_keys(df, cols) if cols else []
            if split:  # the keys that tell its rows apart, not in its columns: after the keys it shows
                keys = df.attrs.get(GROUPED_BY, ())
                at = cols.index("repeats") if "repeats" in cols else max(
                    (i + 1 for i, c in enumerate(cols) if c in keys), default=len(cols))
                cols = (*cols[:at], *split, *cols[at:])
            console.print(_df_table(df, rep.titles[name], list(cols) if cols else None,
                                    collapse=name in rep.collapse))
            for note in rep.notes.get(name, ()):
                console.print(f"[dim]{escape(note)}[/]", highlight=False)
    for name, why in rep.not_drawn.items():
        console.print(f"[dim]figure {escape(name)} not drawn: {escape(why)}[/]", highlight=False)
    where = escape(str(rep.files[0].parent if rep.files else out))
    console.print(f"wrote {len(rep.files)} file{'' if len(rep.files) == 1 else 's'} to {where}:")
    console.print("  " + escape("  ".join(p.name for p in rep.files)), highlight=False)
