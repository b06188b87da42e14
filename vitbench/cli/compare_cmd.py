"""`vitbench compare BASELINE CURRENT`: speed regression check of two result sets, thin over vitbench.compare."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, err_console, print_json, warn
from vitbench.cli.options import cli_option, from_constant
from vitbench.errors import ConfigError

_FORMATS = ("table", "md", "json")
_STYLE = {"regression": "bold red", "failed": "bold red", "improvement": "green", "inconclusive": "yellow",
          "no change": "", "no data": "dim"}


@app.command("compare")
def compare_cmd(
    baseline: str = typer.Argument(..., help="Baseline results: a .jsonl file or a results directory."),
    current: str = typer.Argument(..., help="Current results: a .jsonl file or a results directory."),
    threshold: float = from_constant("vitbench.compare.decide", "DEFAULT_THRESHOLD",
                                     help="Relative change that matters: 0.05 = 5 %. A regression needs the whole "
                                          "confidence interval past it."),
    fmt: str = cli_option("format", "--format", help="table (terminal) | md (Markdown) | json "
                                                     "(github-action-benchmark customBiggerIsBetter)."),
    normalize: bool = cli_option("normalize", "--normalize/--no-normalize",
                                 help="Divide speeds by the calibration workload (matmul TFLOP/s) measured in "
                                      "the same run, so a slower machine is not called a regression."),
    metric: list[str] = typer.Option(None, "--metric", "-m",
                                     help="Metric to compare (repeatable): any metric a task declares comparable "
                                          "(img_per_s, max_batch_size, peak_mem_mib, compile_s, accuracy, ...; "
                                          "default: every metric its task marks default_compare: the built-in "
                                          "tasks' speeds and largest batch)."),
    ignore: list[str] = typer.Option(None, "--ignore", help="Trial-config field left out of matching "
                                                           "(repeatable), e.g. threads."),
    confidence: float = from_constant("vitbench.compare.decide", "DEFAULT_CONFIDENCE",
                                      help="Confidence of the bootstrap interval on current / baseline."),
    run_noise: float = typer.Option(None, "--run-noise", metavar="SD",
                                    help="Between-run sd of log throughput on your host (e.g. 0.05), assumed "
                                         "where a side has one run. Default: vitbench's measured floor for the "
                                         "host state the rows recorded (quiet or busy); with several runs per "
                                         "side the runs' own spread is used (a busy side's held to the busy "
                                         "floor) and this is ignored."),
    allow_missing: bool = cli_option("allow_missing", "--allow-missing",
                                     help="Do not fail when trials that were ok in the baseline are missing "
                                          "from current (they are still listed)."),
    inject_slowdown: float = typer.Option(None, "--inject-slowdown", hidden=True,
                                          help="Self-test: make every timed step of CURRENT this many times "
                                               "slower before comparing (the check must then fail)."),
) -> None:
    """Compare two result sets trial by trial; exit 1 on a regression, 3 when the noise leaves it undecided.

    Trials are matched by their measured configuration (model, backend, task, resolution, precision, batch,
    compile, device, ...), not by environment; differing environments are listed. Throughput is decided on an
    interval of current / baseline that holds the noise between runs: with several runs per side (repeats, or
    sweeps into several directories) the runs are the units; with one run on a side its between-run noise is
    assumed (--run-noise, else the measured floor for a quiet or busy host) on top of the steps' own spread.
    Regression: the whole interval worse than --threshold; no change: the whole interval on the good side of it;
    else inconclusive. Unmatched trials are listed.

    Exit code: 0 = no regression; 1 = a regression, a trial ok in the baseline failed now, or one is missing
    from current (unless --allow-missing); 2 = bad input, including nothing compared at all; 3 = inconclusive
    (as `vitbench ab`): a trial the noise leaves undecided, e.g. one sweep per side on a busy host.
    """
    from vitbench.compare import compare_paths

    if fmt not in _FORMATS:
        raise ConfigError(f"--format {fmt!r} is not allowed; allowed: {', '.join(_FORMATS)}")
    cmp = compare_paths(baseline, current, threshold=threshold, normalize=normalize,
                        metrics=tuple(metric) if metric else None, ignore=tuple(ignore or ()),
                        confidence=confidence, slowdown=inject_slowdown, allow_missing=allow_missing,
                        run_noise=run_noise)
    _show(cmp, fmt, f"current / baseline: {current} vs {baseline}")


def _show(cmp, fmt: str, title: str) -> None:
    """Print a Comparison in `fmt` and exit with its exit code (compare and ab alike)."""
    from vitbench.compare import COLUMNS, row_cells, summary_line, to_benchmark_json, to_markdown

    for w in cmp.warnings:
        warn(w)
    if fmt == "json":
        print_json(to_benchmark_json(cmp))
        for k, v in cmp.context:
            err_console.print(escape(f"{k}: {v}"), highlight=False, soft_wrap=True)
        err_console.print(escape(summary_line(cmp)), highlight=False, soft_wrap=True)
        for lbl, why in cmp.unmatched_baseline + cmp.unmatched_current:
            err_console.print(escape(f"unmatched: {lbl} ({why})"), highlight=False, soft_wrap=True)
        for lbl, why in cmp.not_compared:
            err_console.print(escape(f"not compared: {lbl} ({why})"), highlight=False, soft_wrap=True)
    elif fmt == "md":
        sys.stdout.write(to_markdown(cmp))
    else:
        for k, v in cmp.context:
            console.print(f"[bold]{escape(k)}:[/] {escape(v)}", highlight=False, soft_wrap=True)
        t = Table(title=escape(title), title_justify="left")
        for c in COLUMNS:
            t.add_column(c, justify="right" if c in ("baseline", "current", "ratio", "CI") else "left",
                         overflow="fold")
        for r in cmp.rows:
            cells = row_cells(r)
            t.add_row(*[escape(cells[c]) for c in COLUMNS], style=_STYLE.get(r.decision.value, ""))
        console.print(t)
        if cmp.env_diff:
            e = Table(title="environment differences", title_justify="left")
            for c in ("field", "baseline", "current"):
                e.add_column(c, overflow="fold")
            for row in cmp.env_diff:
                e.add_row(*map(escape, row))
            console.print(e)
        unmatched = (("only in baseline (not compared)" + ("" if cmp.allow_missing or not cmp.missing else
                                                           ": fails the check, see --allow-missing"),
                      cmp.unmatched_baseline),
                     ("only in current (not compared)", cmp.unmatched_current),
                     ("matched, no metric to compare (see --metric)", cmp.not_compared))
        for title, items in unmatched:
            if items:
                console.print(f"[bold]{title}:[/]")
                for lbl, why in items:
                    console.print(f"  {escape(lbl)}: {escape(why)}", highlight=False)
        console.print(("[bold red]" if cmp.exit_code else "[bold green]") + escape(summary_line(cmp)) + "[/]",
                      highlight=False)
    raise typer.Exit(cmp.exit_code)


@app.command("ab")
def ab_cmd(
    ref: str = typer.Argument(..., help="Baseline: a git ref (commit, branch, tag) of the repository."),
    study: str = from_constant("vitbench.compare.ab", "DEFAULT_STUDY",
                               help="Study file, relative to each side's checkout (each side "
                                                  "runs its own copy)."),
    baseline_study: str = typer.Option(None, "--baseline-study",
                                       help="The baseline's study file if it differs (relative to REF's tree)."),
    threshold: float = from_constant("vitbench.compare.decide", "DEFAULT_THRESHOLD",
                                     help="Slowdown that matters: 0.05 = 5 %. Regression: the whole interval of "
                                          "current / baseline below 1 - threshold."),
    confidence: float = from_constant("vitbench.compare.decide", "DEFAULT_CONFIDENCE",
                                      help="Confidence of the paired interval."),
    min_pairs: int = from_constant("vitbench.compare.paired", "DEFAULT_MIN_PAIRS", "--min-pairs",
                                  help="Round pairs always measured before a decision."),
    max_pairs: int = typer.Option(None, "--max-pairs", help="Stop after this many pairs (default: the budget)."),
    budget_s: float = from_constant("vitbench.compare.ab", "DEFAULT_BUDGET_S", "--budget-s",
                                    help="Wall-clock budget in seconds: the first pair always runs (it times "
                                         "a pair), and no later pair starts that would pass the budget."),
    fmt: str = cli_option("format", "--format", help="table | md (Markdown) | json (github-action-benchmark)."),
    results: str = typer.Option(None, "--results", help="Keep every round's results here (a new or empty "
                                                        "directory); default: a temporary one, removed."),
    repo: str = cli_option("repo", "--repo", help="The git checkout whose working tree is current."),
    allow_same: bool = cli_option("allow_same", "--allow-same", help="Allow REF to be the checked-out commit with no "
                                                                     "change (an A/A noise check)."),
    schedule: str = from_constant("vitbench.compare.schedule", "DEFAULT_SCHEDULE",
                                  help="alternate: a pair's two rounds one after the other on the same CPUs, the "
                                       "first side alternating; together: both at once (same load), in two legs "
                                       "with each side pinned to its half of the CPUs, swapped; shared: both at once "
                                       "on the same CPU, time-sliced by the OS; turns: both on the same CPU, taking "
                                       "turns window by window, a leg on each half of the CPUs at once (a commit "
                                       "from before turns runs together)."),
    statistic: str = from_constant("vitbench.compare.ab", "DEFAULT_STATISTIC",
                                   help="A trial's value in a round: best (fastest step: least moved by other "
                                        "load) | p90 (the 90th percentile of its steps' img/s: the fast end, not "
                                        "one lucky step) | median."),
    extra_work: float = typer.Option(None, "--test-extra-work", hidden=True,
                                     help="Test only: current's timed steps carry this fraction of extra real "
                                          "work (the gate's power test)."),
) -> None:
    """Measure git REF against the working tree in one job and decide on paired ratios; exit 1 on a regression.

    REF's code (git archive, removed afterwards) and the working tree each run `vitbench sweep STUDY` in their own
    environment (the same interpreter when vitbench/requirements.lock is identical, else a virtualenv from REF's
    lock), in interleaved rounds A B, B A, ... Per trial, the ratio current / baseline of each pair's img/s (the
    --statistic of its steps) gives a t-interval on the mean log-ratio; pairs are added until every trial is
    decided or the budget is spent.

    Exit code: 0 = no regression (every interval above 1 - threshold); 1 = a regression (an interval wholly below)
    or a trial ok on REF failed; 2 = bad input (unknown ref, not a git checkout, no study, bad option);
    3 = inconclusive: the budget ended with a trial undecided (said plainly; a gate must not pass it silently).
    """
    from vitbench.cli.common import choice
    from vitbench.compare.ab import Statistic, run_ab
    from vitbench.compare.schedule import Schedule
    from vitbench.compare.paired import Rule

    choice(fmt, _FORMATS, "--format")
    sched = Schedule.parse(schedule, "--schedule")
    stat = Statistic.parse(statistic, "--statistic")
    if extra_work is not None and not (0 < extra_work <= 10):
        raise ConfigError(f"--test-extra-work must be a fraction in (0, 10], got {extra_work}")
    if results is not None:
        from vitbench.paths import check_dir

        check_dir(results, "--results")  # named as typed, before any checkout (/dev/null: a traceback before)
    rule = Rule(threshold, confidence, min_pairs, max_pairs)
    try:
        res = run_ab(ref, repo=repo, study=study, baseline_study=baseline_study, rule=rule, budget_s=budget_s,
                     results=results, extra_work=extra_work, allow_same=allow_same, schedule=sched,
                     statistic=stat, progress=lambda s: err_console.print(s, highlight=False, soft_wrap=True))
    except KeyboardInterrupt:  # exit 130 as before, saying what is left (it exited without a word)
        kept = (f"; the pairs measured so far are in {escape(str(results))}, not resumable (a new run needs a new "
                "or empty --results)") if results is not None else ""
        err_console.print(f"[yellow]interrupted[/]: no verdict{kept}", highlight=False, soft_wrap=True)
        raise
    _show(res.comparison, fmt, f"current / baseline, paired: working tree vs {ref}")
