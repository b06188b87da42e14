"""`vitbench bisect GOOD BAD`: the commit where the speed regressed, thin over vitbench.compare.bisection."""

from __future__ import annotations

import typer
from rich.markup import escape

from vitbench.cli import app
from vitbench.cli.common import console, err_console
from vitbench.cli.options import cli_option, from_constant
from vitbench.env import short_sha
from vitbench.numfmt import percent


@app.command("bisect")
def bisect_cmd(
    good: str = typer.Argument(..., help="A commit (branch, tag, SHA) whose speed is the reference."),
    bad: str = typer.Argument(..., help="A later commit, on GOOD's first-parent line, that is slower."),
    study: str = from_constant("vitbench.compare.ab", "DEFAULT_STUDY",
                               help="Study file, relative to each commit's tree (each side runs its own copy)."),
    threshold: float = from_constant("vitbench.compare.decide", "DEFAULT_THRESHOLD",
                                     help="Slowdown that matters: 0.05 = 5 %. BAD is bisected when the whole "
                                          "interval of BAD / GOOD is below 1 - threshold; each later commit is "
                                          "held between GOOD's speed and BAD's."),
    budget_s: float = from_constant("vitbench.compare.ab", "DEFAULT_BUDGET_S", "--budget-s",
                                    help="Wall-clock budget of each step's `ab` run, in seconds (its first pair "
                                         "always runs)."),
    repo: str = cli_option("repo", "--repo", help="The git checkout whose commits are bisected."),
) -> None:
    """Find the first commit between GOOD and BAD whose speed regressed against GOOD, each step a `vitbench ab`
    run of GOOD against one commit (paired rounds, each side its own checkout and environment).

    The first step checks BAD against GOOD and measures how much slower it is; then a binary search over BAD's
    first-parent line, about log2(N) steps for N commits, each commit decided as fast as GOOD (good) or as slow
    as BAD (bad). An inconclusive step is never read as good or bad: the bisection stops and names the range it
    had narrowed to (rerun on it with a larger --budget-s); an inconclusive first step narrowed nothing (BAD was
    never shown slower: rerun with a larger --budget-s, or on a quieter host).

    Exit code: 1 = a regression, its first bad commit found; 0 = BAD did not regress against GOOD; 2 = bad input
    (unknown commit, GOOD not an ancestor of BAD, no study, bad option); 3 = a step was inconclusive.
    """
    from vitbench.compare.bisection import run_bisect
    from vitbench.compare.paired import Rule

    rule = Rule(threshold)
    res = run_bisect(good, bad, repo=repo, study=study, rule=rule, budget_s=budget_s,
                     progress=lambda s: err_console.print(escape(s), highlight=False, soft_wrap=True))
    for i, s in enumerate(res.steps, 1):
        console.print(escape(f"step {i}: {short_sha(s.commit)} {s.reading:<12} {s.elapsed_s:5.0f} s  "
                             f"{s.subject}"), highlight=False, soft_wrap=True)
    n = len(res.commits)
    if res.first_bad is not None:
        subject = next((s.subject for s in res.steps if s.commit == res.first_bad), "")
        line = (f"first bad commit: {res.first_bad} ({subject}), {len(res.steps)} ab steps over {n} commits, "
                f"{res.elapsed_s:.0f} s")
    elif res.bad_unconfirmed:
        line = (f"inconclusive: step 1 could not tell whether BAD {short_sha(res.bad)} is slower than GOOD "
                f"{short_sha(res.good)} beyond {percent(threshold)} (its interval held both), so nothing was "
                "bisected; rerun with a larger --budget-s (more pairs) or on a quieter host (`vitbench doctor` "
                "reads the load)")
    elif res.range is not None:
        lo, hi = map(short_sha, res.range)
        line = (f"inconclusive: a step could not tell; the first bad commit is after {lo} and at or before {hi} "
                f"(rerun: vitbench bisect {lo} {hi} with a larger --budget-s)")
    else:
        line = (f"no regression: BAD {short_sha(res.bad)} is not slower than GOOD {short_sha(res.good)} beyond "
                f"{percent(threshold)}")
    console.print(("[bold red]" if res.exit_code else "[bold green]") + escape(line) + "[/]", highlight=False,
                  soft_wrap=True)
    raise typer.Exit(res.exit_code)
