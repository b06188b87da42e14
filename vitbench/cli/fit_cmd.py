"""`vitbench fit`: scaling-law fits of error against compute, thin over vitbench.fit and report.fit_figures."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, print_json
from vitbench.paths import check_dir, make_dir, write_atomic


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def _show(report) -> None:
    ci = f"{report.spec.ci:.0%}"
    for g in report.groups:
        best = g.best()
        t = Table(title=escape(f"{g.title}: {len(g.compute)} points; error = {report.error_label}, "
                               f"C = {report.spec.compute}"), title_justify="left")
        for col in ("form", "param", "value", f"{ci} CI", "fit rmse_log", "held-out |err| (rel)"):
            t.add_column(col, justify="left" if col in ("form", "param") else "right")
        notes = []
        for f in g.fits:
            h = f.heldout
            held = ""
            if h is not None and h.abs_err_mean is not None:
                held = f"{h.abs_err_mean:.4f} ({h.rel_err_mean:.1%}) on {len(h.observed)} pts"
            name = f.form.name.value + (" *" if f is best else "")
            for i, (k, p) in enumerate(f.params.items()):
                ci_text = f"[{p.ci_low:.4g}, {p.ci_high:.4g}]" if p.ci_low is not None else "-"
                t.add_row(name if i == 0 else "", k, _num(p.value), ci_text,
                          _num(f.rmse_log) if i == 0 else "", held if i == 0 else "")
            if not f.params:
                t.add_row(name, "-", "", "", "", "")
            held_note = h.message if h is not None and f.params else None  # unfitted: one note is enough
            notes += [f"{f.form.name.value}: {m}" for m in (f.message, held_note) if m]
            t.add_section()
        console.print(t)
        for note in notes:
            console.print(f"  [dim]{note}[/]", highlight=False)
    console.print(f"[dim]{ci} bootstrap CIs ({report.spec.bootstrap} replicates). Held-out: fit on all but the "
                  f"largest {report.spec.holdout:.0%} of compute budgets, mean |predicted - observed| error on "
                  f"them (points). * = the form to extrapolate with (lowest held-out error). "
                  f"E = e_inf + a*(C + c0)^-b; offset: c0 = 0; power: e_inf = c0 = 0.[/]")
    for note in report.dropped:
        console.print(f"[yellow]left out:[/] {note}")


@app.command("fit")
def fit_cmd(
    source: str = typer.Argument(..., help="A results directory (or .jsonl) or a CSV file."),
    compute: str = typer.Option("pretrain_exaflops", "--compute",
                                help="Compute column (x): pretrain_exaflops, images_seen, params_m, "
                                     "inference_gflops, or any numeric CSV column."),
    error: str = typer.Option(None, "--error", help="Error column (lower is better)."),
    accuracy: str = typer.Option(None, "--accuracy",
                                 help="Accuracy column, fitted as 1 - accuracy (default: `accuracy`, or a CSV's "
                                      "`error` column)."),
    percent: bool = typer.Option(False, "--percent", help="The error/accuracy column is in percent (0-100)."),
    group: list[str] = typer.Option(None, "--group",
                                    help="Group by this column (repeatable; default: family). Results are "
                                         "always split by benchmark (kind, dataset, shots) too."),
    form: list[str] = typer.Option(None, "--form", help="saturating | offset | power (repeatable; default all)."),
    points: str = typer.Option("all", "--points", help="all | frontier (only rows no cheaper row beats)."),
    holdout: float = typer.Option(0.25, "--holdout", help="Share of the largest compute budgets held out."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Bootstrap replicates for the CIs."),
    ci: float = typer.Option(0.95, "--ci", help="Confidence level of the intervals and bands."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document on stdout, nothing else."),
    out: str = typer.Option(None, "--out", "-o", help="Write fit.json and the plots (PNG + SVG) here."),
) -> None:
    """Fit scaling laws of error against compute per group: parameters with CIs, held-out error, plots.

    E(C) = e_inf + a*(C + c0)^-b (saturating, Zhai et al. 2022), e_inf + a*C^-b (offset) and a*C^-b (power),
    fitted on log residuals with a robust loss from many starts; bootstrap confidence intervals; a held-out
    check that fits the smaller budgets and predicts the largest ones. See docs/scaling-laws.md.
    """
    from vitbench.fit import FitSpec, fit_source, load_source
    from vitbench.transfer.config import validated

    spec = validated(FitSpec, {"compute": compute, "error": error, "accuracy": accuracy, "percent": percent,
                               "group": group or None, "forms": form or FitSpec().forms, "points": points,
                               "holdout": holdout, "bootstrap": bootstrap, "ci": ci, "seed": seed}, "vitbench fit")
    if out:
        check_dir(out, "--out")  # before minutes of bootstrap
    src = load_source(source)
    report = fit_source(src, spec)
    doc = report.to_dict()
    written = []
    if out:
        written = _write(src, report, doc, Path(out))
    if as_json:
        print_json(doc)
        return
    _show(report)
    for p in written:
        console.print(f"wrote {p}")


def _write(src, report, doc: dict, out: Path) -> list[Path]:
    """Render fit.json and every figure first, then write each file whole (nothing half-written)."""
    import io
    import json

    from vitbench.fit import SourceKind
    from vitbench.report import figure as report_figure
    from vitbench.report import fit_figures

    figures = {"fit_curves": fit_figures.fitted_curves(src.frame, fits=report),
               "compute_frontier": fit_figures.compute_frontier(src.frame, fits=report)}
    if src.kind == SourceKind.RESULTS:
        figures["throughput_vs_accuracy"] = report_figure("throughput_vs_accuracy", src.frame)  # speed rows too
    files: dict[str, bytes | str] = {"fit.json": json.dumps(doc, indent=2) + "\n"}
    for name, fig in figures.items():
        if fig is None:
            continue
        for ext in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=130 if ext == "png" else None)
            files[f"{name}.{ext}"] = buf.getvalue()
    make_dir(out, "--out")
    return [write_atomic(out / name, data) for name, data in files.items()]
