"""`vitbench fit`: scaling-law fits of error against compute, thin over vitbench.fit and report.fit_figures."""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, err_console, option, print_json, warn
from vitbench.cli.options import cli_option, field_options, from_field
from vitbench.errors import ConfigError, shorten
from vitbench.fit.spec import FitSpec
from vitbench.outdir import Writer
from vitbench.paths import check_dir


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def _laws(g, report, ci: str) -> tuple[Table, Table, list[str]]:
    """A group's two tables, each narrow enough for an 80-column terminal: the laws (the score that chose and
    weighted each, its weight, its backtest error at the reach, its in-sample error) and their parameters with
    CIs; and the notes under them."""
    from vitbench.errors import clip

    bt, best = g.backtest, g.best()
    reach = f"; backtest {bt.reach:.2g} decades out" if bt is not None else ""
    power = f", weight ~ score^-{bt.weight_power:.2g}" if bt is not None and g.scores else ""
    laws = Table(title=escape(clip(f"{g.title}: {len(g.compute)} points; error = {report.error_label}, C = "
                                   f"{shorten(report.spec.compute, 40).strip(chr(39))}{reach}{power}", 300)),
                 title_justify="left")
    for col in ("law", "score", "weight", "backtest rmse_log", "at points", "fit rmse_log"):
        laws.add_column(col, justify="left" if col == "law" else "right")
    params = Table(title=escape(clip(f"{g.title}: parameters, {ci} bootstrap CIs", 300)), title_justify="left")
    for col in ("law", "param", "value", f"{ci} CI"):
        params.add_column(col, justify="left" if col in ("law", "param") else "right")
    notes = []
    for f in g.fits:
        name = f.form.name.value
        b = bt.get(f.form) if bt is not None else None
        scored = b is not None and b.rmse_log is not None
        score, w = g.scores.get(name), g.weights.get(name)
        laws.add_row(name + (" *" if f is best else ""), _num(score), f"{w:.2f}" if w is not None else "",
                     f"{b.rmse_log:.3f}" if scored else "-", str(int(b.at_reach.sum())) if scored else "",
                     _num(f.rmse_log))
        for i, (k, p) in enumerate(f.params.items()):
            params.add_row(name if i == 0 else "", k, _num(p.value),
                           f"[{p.ci_low:.4g}, {p.ci_high:.4g}]" if p.ci_low is not None else "-")
        if not f.params:
            params.add_row(name, "-", "", "")
        params.add_section()
        bt_note = b.message if b is not None and f.params else None  # unfitted: one note is enough
        notes += [f"{name}: {m}" for m in (f.message, bt_note) if m]
    if bt is not None and bt.message:
        notes.append(f"backtest: {bt.message}")
    if g.exponent is not None and g.exponent.ci_low is not None:
        notes.append(f"exponent b = {g.exponent.value:.3g} ({g.chosen.value}), {ci} interval over the forms "
                     f"weighted by the backtest: [{g.exponent.ci_low:.3g}, {g.exponent.ci_high:.3g}]")
    return laws, params, notes


def _show(report) -> None:
    from vitbench.errors import clip
    from vitbench.fit.backtest import PRIOR_SHARE, RECENCY, RICHER

    ci = f"{report.spec.ci:.0%}"
    for g in report.groups:
        laws, params, notes = _laws(g, report, ci)
        console.print(laws)
        console.print(params)
        for note in notes:
            console.print(f"  [dim]{escape(clip(note, 600))}[/]", highlight=False)
        for note in g.notes:
            console.print(f"  [yellow]warning:[/] {escape(note)}", highlight=False)
        if g.predictions:
            held = g.law_error.coverage_text() if g.law_error else None
            p = Table(title=f"predictions (the forms combined by weight: {g.law().label}; {ci} prediction "
                            f"interval: parameters, noise and the combined law's backtest error at the reach, "
                            f"within what a decreasing law allows"
                            + (f"; {held}" if held else "; no backtest") + ")",
                      title_justify="left")
            for col in (shorten(report.spec.compute, 40).strip("'"), "reach [decades]", "error", f"{ci} interval",
                        "backtest miss"):
                p.add_column(escape(col), justify="right")
            for x in g.predictions:
                miss = f"x{math.exp(x.backtest_rmse_log):.3g}" if x.backtest_rmse_log is not None else "-"
                band = f"[{x.ci_low:.4g}, {x.ci_high:.4g}]" if x.ci_low is not None else "- (not measured)"
                p.add_row(f"{x.compute:.4g}", f"{x.reach:+.2f}", f"{x.value:.4g}", band, miss)
            console.print(p)
    boots = (f"{ci} bootstrap CIs ({report.spec.bootstrap} replicates)" if report.spec.bootstrap > 1 else
             f"no bootstrap CIs (--bootstrap {report.spec.bootstrap})")
    console.print(f"[dim]{boots}. Backtest: each law fitted on "
                  f"the budgets up to a cut-off predicts the points up to the reach beyond it; its rmse_log is at "
                  f"the reach (docs/scaling-laws.md). Score: what chose (*) and weighted the laws, lower is "
                  f"better: the backtest's error per decade of reach, each later cut-off counting {RECENCY:g}x, "
                  f"divided by {RICHER:g} per parameter beyond the fewest"
                  + (f", then the group's own^{1 - PRIOR_SHARE:g} x the law's over all {len(report.groups)} "
                     f"groups^{PRIOR_SHARE:g} (--prior groups)" if report.prior else "")
                  + ". Weight: the law's share in the predictions, which combine the laws' log predictions, and "
                  "in the intervals."
                  # the predictions table's columns, explained where one is shown (--predict)
                  + (" Backtest miss: the typical factor a prediction at this reach was off by. Prediction "
                     "intervals: parameters, one observation's noise and the law's backtest error at the reach "
                     "(Student's t over the backtest's independent windows: its points miss together), never "
                     "above the interval at a measured budget below, never below the laws' floor; with how often "
                     "such intervals held the backtest's points." if any(g.predictions for g in report.groups)
                     else "") + "[/]")
    for note in report.dropped:
        console.print(f"[yellow]left out:[/] {escape(note)}")


def _progress(start: float):
    """A progress callback: a line on stderr at most every 2 s once a fit has run 2 s (quiet on short fits)."""
    last = [start]

    def report(done: int, total: int, title: str) -> None:
        now = time.monotonic()
        if now - start > 2 and (now - last[0] > 2 or done == total):
            last[0] = now
            from vitbench.errors import clip

            line = f"fit: {done}/{total} steps, 2 per group ({now - start:.0f} s) {clip(title, 80)}"
            err_console.print(f"[dim]{escape(line)}[/]",
                              highlight=False)
    return report


# the fit's settings: vitbench.fit.spec imports no fitting code (scipy), so --help shows their values at no cost
_FIT = FitSpec


@app.command("fit")
def fit_cmd(
    source: str = typer.Argument(..., help="A results directory (or .jsonl) or a CSV file."),
    compute: str = from_field(_FIT, "compute", "--compute",
                              help="Compute column (x): pretrain_exaflops, images_seen, params_m, "
                                   "inference_gflops, or any numeric CSV column."),
    error: str = typer.Option(None, "--error", help="Error column: any lower-is-better value >= 0 (a fraction, "
                                                     "a cross-entropy, a perplexity)."),
    accuracy: str = typer.Option(None, "--accuracy",
                                 help="Accuracy column, fitted as 1 - accuracy (default: `accuracy`, or a CSV's "
                                      "`error` column)."),
    percent: bool = from_field(_FIT, "percent", "--percent",
                               help="The error/accuracy column is in percent (0-100)."),
    group: list[str] = typer.Option(None, "--group",
                                    help="Group by this column (repeatable; default: family). Results are "
                                         "always split by benchmark (kind, dataset, shots) too."),
    where: str = typer.Option(None, "--where", help="Only the rows where this holds: a pandas query over the "
                                                      "columns, e.g. \"kind == 'finetune' and steps >= 100\"."),
    form: list[str] = from_field(_FIT, "forms", "--form", help="power | offset | saturating | m4 (repeatable)."),
    points: str = from_field(_FIT, "points", "--points", help="all | frontier (only rows no cheaper row beats)."),
    predict: str = typer.Option(None, "--predict", help="Predict the error at these compute values: C[,C...]."),
    reach: float = typer.Option(None, "--reach",
                                help="Backtest reach in decades of compute past the fitted budgets (default: as "
                                     "far as --predict, else a third of the measured decades)."),
    cutoffs: int = from_field(_FIT, "cutoffs", "--cutoffs",
                              help="Backtest cut-offs: the full-reach one, then 2 a quarter-reach later each, "
                                   "then each a quarter-reach earlier."),
    bootstrap: int = from_field(_FIT, "bootstrap", "--bootstrap", help="Bootstrap replicates for the CIs (0: none)."),
    ci: float = from_field(_FIT, "ci", "--ci", help="Confidence level of the intervals and bands."),
    seed: int = from_field(_FIT, "seed", "--seed", help="Bootstrap seed."),
    prior: str = from_field(_FIT, "prior", "--prior",
                            help="groups | none: each group's choice of form also weighs the forms' backtest "
                                 "scores over all the fit's groups, or its own backtest alone."),
    workers: int = typer.Option(None, "--workers", min=1,
                                help="Processes fitting groups in parallel (default: every core)."),
    as_json: bool = cli_option("json", "--json", help="Print one JSON document on stdout, nothing else."),
    out: str = typer.Option(None, "--out", "-o", help="Write fit.json and the plots (PNG + SVG) here."),
    allow_other_files: bool = cli_option("allow_other_files", "--allow-other-files",
                                         help="Write into an --out holding files no fit wrote: the fit's files go "
                                              "beside them and never touch them."),
) -> None:
    """Fit scaling laws of error against compute per group, judge them by a backtest at the reach you need,
    predict: parameters with CIs, the backtest error, predictions with intervals, plots.

    E = a*C^-b (power), e_inf + a*C^-b (offset), e_inf + a*(C + c0)^-b (saturating, Zhai et al. 2022) and
    (E - e_inf)/(e0 - E)^alpha = a*C^-b (m4, Alabdulmohsin et al. 2022), fitted on log residuals with a robust loss
    from many starts; bootstrap confidence intervals; a backtest that fits the smaller budgets and predicts the
    larger ones chooses the form and weights the intervals. See docs/scaling-laws.md.
    """
    from vitbench.fit import fit_source, load_source
    from vitbench.transfer.config import parse_floats, validated

    points_at = parse_floats(predict, "--predict", "1e-5,1e-4") if predict is not None else None
    if points_at is not None and not all(math.isfinite(x) and x > 0 for x in points_at):
        raise ConfigError(f"--predict {shorten(predict, 100)}: every compute value must be a finite number > 0")
    spec = validated(FitSpec, {"compute": compute, "error": error, "accuracy": accuracy, "percent": percent,
                               "group": group or None, "where": where, "forms": form,
                               "points": points, "predict": points_at, "reach": reach, "cutoffs": cutoffs,
                               "bootstrap": bootstrap, "ci": ci, "seed": seed, "prior": prior}, "vitbench fit",
                     {f: option(f, field_options(fit_cmd, FitSpec.model_fields)) for f in FitSpec.model_fields})
    if out:
        check_dir(out, "--out")  # before minutes of bootstrap
        if Path(out).is_dir():
            _check_out(Path(out), allow_other_files)  # files of another's there: refused now, not after the fit
    src = load_source(source)
    report = fit_source(src, spec, workers=workers, progress=_progress(time.monotonic()))
    doc = report.to_dict()
    written = []
    if out:
        written = _write(src, report, doc, Path(out), allow_other_files)
    if as_json:
        for g in report.groups:
            for note in g.notes:
                warn(note)
        print_json(doc)
    else:
        if not all(g.no_prediction for g in report.groups):  # else nothing asked for can be shown: the error alone
            _show(report)
        for p in written:
            console.print(f"wrote {escape(str(p))}")
    _exit_if_unpredicted(report)


FIT_FILES = Writer("fit", ".vitbench-fit.json", (".json", ".png", ".svg"))  # what `fit --out` writes (outdir)
EXIT_UNPREDICTED = 1  # --predict asked and some group has no prediction (or no interval), or no group has a law:
# the input was valid (a file of few budgets is one), the run could not give a result, as a failed measurement


def _exit_if_unpredicted(report) -> None:
    """After the output (the fits that were made are results): one line naming every group whose predictions
    --predict asked for are missing or have no interval, or, where no group got a law at all, every group and
    why; exit EXIT_UNPREDICTED."""
    from vitbench.errors import clip
    from vitbench.fit.predict import no_law

    missing = [g.no_prediction for g in report.groups if g.no_prediction]
    head = f"--predict: {len(missing)} of {len(report.groups)} groups not predicted: "
    if not missing and report.groups and all(g.chosen is None for g in report.groups):
        missing = [no_law(g) for g in report.groups]  # nothing fitted anywhere: no result, never exit 0
        head = f"no law could be fitted in any of the {len(missing)} group(s): "
    if missing:
        err_console.print(f"[bold red]error:[/] {escape(clip(head + '; '.join(missing), 1000))}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(EXIT_UNPREDICTED)


def _check_out(out: Path, allow_other: bool) -> None:
    """--out as the fit's output folder (vitbench.outdir): only files a fit wrote there are replaced; a
    folder holding anyone else's is refused unless `allow_other`."""
    from vitbench.outdir import OutputFolder

    OutputFolder(out, FIT_FILES, allow_other=allow_other).check()


def _write(src, report, doc: dict, out: Path, allow_other: bool) -> list[Path]:
    """Render fit.json and every figure first, then move them into --out (vitbench.outdir: nothing
    half-written, no file of anyone else's overwritten)."""
    import io
    import json

    from vitbench.fit import SourceKind
    from vitbench.outdir import write_files
    from vitbench.report import figure as report_figure
    from vitbench.report import fit_figures

    figures = {"fit_curves": fit_figures.fitted_curves(src.frame, fits=report),
               "compute_frontier": fit_figures.compute_frontier(src.frame, fits=report)}
    if src.source_kind == SourceKind.RESULTS:
        figures["throughput_vs_accuracy"] = report_figure("throughput_vs_accuracy", src.frame)  # speed rows too
    files: dict[str, bytes | str] = {"fit.json": json.dumps(doc, indent=2) + "\n"}
    for name, fig in figures.items():
        if fig is None:
            continue
        for ext in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=130 if ext == "png" else None)
            files[f"{name}.{ext}"] = buf.getvalue()
    return write_files(out, {n: d if isinstance(d, bytes) else d.encode() for n, d in files.items()}, FIT_FILES,
                       allow_other)
