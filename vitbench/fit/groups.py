"""Fits per group: choose the rows and columns, split them, fit, backtest and predict every group, one report.

A results source is always split by its benchmark (kind, dataset, shots: few-shot k and fine-tune are
different metrics) and then by `group` (default `family`); a CSV only by `group` (default `family` if it has
that column, else one group). Error is `error` (any lower-is-better value >= 0: a fraction, a
cross-entropy, a perplexity), or 1 - `accuracy` (a fraction); `percent` says the column is 0-100. `where`
filters the rows first (vitbench.fit.rows). `points`: `all` fits every row; `frontier` only the rows no cheaper
row beats (the compute-optimal envelope, what Zhai et al. 2022 fit when a group holds several
model sizes). `prior`: each group's choice of form also weighs the forms' backtest scores over every group of the
fit (vitbench.fit.backtest, "Prior"), or (`none`) its own backtest alone. Groups are fitted in worker processes
(`workers`), all backtested first, then chosen and predicted; a group's result depends on its points, the spec
and (with the prior) the other groups' backtest scores (fixed seeds), never on the number of workers or the
groups' order.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from vitbench.errors import ConfigError, shorten
from vitbench.fit import rows as rowsel
from vitbench.fit.backtest import PRIOR_SHARE, Backtest, blended_scores, choose, default_reach, mixture_param, \
    param_log_var, prior_scores, run_backtest, scores, spread_backtest
from vitbench.fit.combine import Combined, Misses, combined_law_error, floor_bound, misses, upper_cap
from vitbench.fit.estimate import CurveFit, ParamEstimate, fit_curve
from vitbench.fit.forms import COMPUTE_LIMIT, FORMS, FormName
from vitbench.fit.interval import LawError, prior_k2
from vitbench.fit.predict import Prediction, check_predict, no_law, predict_group
from vitbench.fit.table import Source, SourceKind, load_source, no_column, numeric_column
from vitbench.fit.spec import DEFAULT_ACCURACY, DEFAULT_COMPUTE, DEFAULT_GROUP, FitSpec, Points, \
    Prior  # noqa: F401
from vitbench.record import clean
from vitbench.stats import frontier_mask


def group_title(key: dict[str, object]) -> str:
    """A group's name in tables and progress lines: its key's non-missing values."""
    return ", ".join(f"{k}={shorten(v, 40).strip(chr(39))}" for k, v in key.items() if v is not None) or "all rows"


@dataclass
class GroupFit:
    key: dict[str, object]  # column -> value for this group (benchmark columns first; None: missing)
    compute: np.ndarray
    error: np.ndarray
    labels: list[str]  # per point: its model, else its group value, else "row N"
    fits: list[CurveFit] = field(default_factory=list)
    backtest: Backtest | None = None
    chosen: FormName | None = None
    runner_up: FormName | None = None  # the next form by the same choice (drawn beside the chosen one)
    weights: dict[str, float] = field(default_factory=dict)  # form -> weight from the backtest
    exponent: ParamEstimate | None = None  # b of the chosen form, CI over the forms' mixture
    predictions: list[Prediction] = field(default_factory=list)
    law_error: LawError | None = None  # the combined law's error model: the intervals and their backtest coverage
    notes: list[str] = field(default_factory=list)  # warnings about this group (pooled curves, few windows)
    scores: dict[str, float] = field(default_factory=dict)  # form -> the score that chose and weighted it
    no_prediction: str | None = None  # why predictions asked for are missing or have no interval (None: fine)
    misses: Misses | None = field(default=None, repr=False)  # the combined law's backtest misses (its error model)

    @property
    def title(self) -> str:
        return group_title(self.key)

    def fit(self, form: FormName) -> CurveFit | None:
        return next((f for f in self.fits if f.form.name == form), None)

    def best(self) -> CurveFit | None:
        """The chosen form: the largest weight (vitbench.fit.backtest.choose)."""
        return self.fit(self.chosen) if self.chosen is not None else None

    def law(self) -> Combined | None:
        """The law predictions are made with: the forms combined by their weights (vitbench.fit.combine)."""
        return Combined.of(self.fits, self.weights)

    @property
    def replicated(self) -> bool:
        """Whether a form with a weight has bootstrap replicates (a parameter term for the intervals)."""
        return any(f.n_replicates > 1 for f in self.fits if self.weights.get(f.form.name.value, 0) > 0)

    def band(self, compute, ci: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, low, high) at `compute`: the combined law and its prediction interval at level `ci` (None:
        the fit's), within what a decreasing law allows (vitbench.fit.interval, "Bounds")."""
        law = self.law()
        le = self.law_error if ci is None else replace(self.law_error, ci=ci)
        xs = np.asarray(compute, dtype=float)
        mid = law.log_predict(xs)
        var = param_log_var(self.fits, self.weights, xs) if self.replicated else np.zeros(len(xs))
        lo, hi = le.band(mid, np.log10(xs / self.compute.max()), var,
                         upper_cap(law, le, self.backtest.compute, xs, self.replicated), floor_bound(law, le))
        return np.exp(mid), lo, hi

    def backtest_parts(self) -> dict[str, list]:
        """Form name -> its backtests (the choice's cut-offs, the spread ones): what the combination's misses are
        made of (vitbench.fit.combine.misses)."""
        if self.backtest is None:
            return {}
        return {f.form.name.value: [b for b in (self.backtest.get(f.form), *self.backtest.spread)
                                    if b is not None and b.form.name == f.form.name] for f in self.fits}

    def to_dict(self) -> dict:
        return {"group": dict(self.key),
                "n_points": len(self.compute),
                "compute_range": [float(self.compute.min()), float(self.compute.max())],
                "error_range": [float(self.error.min()), float(self.error.max())],
                "best_form": self.chosen.value if self.chosen else None,
                "runner_up": self.runner_up.value if self.runner_up else None,
                "backtest_scores": ({n.value: v for n, v in scores(self.backtest, self.fits).items()}
                                    if self.backtest else {}),
                "scores": self.scores,
                "weights": self.weights,
                "exponent": self.exponent.to_dict() if self.exponent else None,
                "predictions": [p.to_dict() for p in self.predictions],
                "prediction_interval": self.law_error.to_dict() if self.law_error else None,
                "notes": self.notes,
                "no_prediction": self.no_prediction,
                "backtest": self.backtest.to_dict() if self.backtest else None,
                "fits": [f.to_dict() for f in self.fits]}


def backtest_group(key: dict, c: np.ndarray, e: np.ndarray, labels: list[str], spec: FitSpec,
                   notes: list[str] | None = None, step: Callable[[str], None] | None = None) -> GroupFit:
    """Every form of `spec` fitted to one group's points and backtested at the reach: the first half of
    fit_group, all that the groups' prior needs (vitbench.fit.backtest, "Prior"); `step(what)` is told after each
    form and after the backtest (progress on a long fit)."""
    check_predict(c, spec.predict, group_title(key))
    g = GroupFit(key, c, e, labels, notes=list(notes or []))
    forms = [FORMS[f] for f in spec.forms]
    for f in forms:
        g.fits.append(fit_curve(c, e, f, bootstrap=spec.bootstrap, ci=spec.ci, seed=spec.seed))
        if step:
            step(f"{f.name.value} fitted")
    g.backtest = run_backtest(c, e, forms, default_reach(c, spec.predict, spec.reach), spec.cutoffs)
    if step:
        step("backtest done")
    return g


def finish_group(g: GroupFit, spec: FitSpec, ceiling: float | None = None,
                 prior: dict[FormName, float] | None = None) -> GroupFit:
    """The second part of fit_group, on a backtest_group: choose (with the groups' `prior`, None: the group's own
    backtest alone), the combined law and its own error model (predict_group predicts); `ceiling`: the largest
    value the error can take (1 for a fraction; None: unbounded), where prediction intervals stop."""
    c, e = g.compute, g.error
    best, g.weights, second = choose(g.backtest, g.fits, prior)
    g.scores = {n.value: v for n, v in blended_scores(g.backtest, g.fits, prior).items()}
    if best is None:
        if spec.predict:
            g.no_prediction = no_law(g)
        return g
    g.chosen = best.form.name
    g.runner_up = second.form.name if second is not None else None
    b = mixture_param(g.fits, g.weights, "b", spec.ci) if g.replicated else None
    g.exponent = ParamEstimate(best.params["b"].value, *(b or (None, None)))
    law = g.law()
    g.backtest.spread = [spread_backtest(f.form, g.backtest) for f in law.fits]
    g.misses = misses(law, g.backtest_parts())
    g.law_error = replace(combined_law_error(law, g.misses, c, e, spec.ci), ceiling=ceiling)
    return g


def fit_group(key: dict, c: np.ndarray, e: np.ndarray, labels: list[str], spec: FitSpec,
              notes: list[str] | None = None, ceiling: float | None = None,
              step: Callable[[str], None] | None = None) -> GroupFit:
    """One group alone: every form of `spec` fitted to its points, backtested at the reach, chosen by its own
    backtest, and predicted (backtest_group, finish_group and predict_group, without a prior); fit_groups fits
    several."""
    return predict_group(finish_group(backtest_group(key, c, e, labels, spec, notes, step), spec, ceiling), spec)


class Job(NamedTuple):
    """One group to fit: fit_group's arguments."""

    key: dict
    compute: np.ndarray
    error: np.ndarray
    labels: list[str]
    spec: FitSpec
    notes: list[str] | None = None
    ceiling: float | None = None


def _backtest_job(job: Job, step: Callable[[str], None] | None = None) -> GroupFit:
    return backtest_group(job.key, job.compute, job.error, job.labels, job.spec, job.notes, step)


def _finish_job(args: tuple[Job, GroupFit, dict | None], step=None) -> GroupFit:
    job, g, prior = args
    return finish_group(g, job.spec, job.ceiling, prior)


def _predict_job(args: tuple[Job, GroupFit, float | None], step=None) -> GroupFit:
    job, g, law_prior = args
    return predict_group(g, job.spec, law_prior)


def fit_groups(jobs: list[Job], workers: int | None = None, prior: Prior = Prior.GROUPS,
               progress: Callable[[int, int, str], None] | None = None
               ) -> tuple[list[GroupFit], dict[FormName, float]]:
    """(the groups, the prior's scores ({}: none)): every job's group fitted, in `workers` processes (None: every
    core), in the jobs' order: all backtested first, then each chosen with the groups' prior (`prior`;
    vitbench.fit.backtest, "Prior"), then predicted with the groups' prior on the law's drift
    (vitbench.fit.interval, "Prior"). `progress(done, total, what)` counts the first two passes (2 steps per
    group; the third is short)."""
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = len(jobs)
    tell = (lambda offset: (lambda done, what: progress(offset + done, 2 * n, what))) if progress else None
    titles = [group_title(j.key) for j in jobs]
    groups = _map(_backtest_job, jobs, titles, workers, tell(0) if tell else None)
    consensus = prior_scores([scores(g.backtest, g.fits) for g in groups]) if prior == Prior.GROUPS else {}
    done = _map(_finish_job, [(j, g, consensus or None) for j, g in zip(jobs, groups)], titles, workers,
                tell(n) if tell else None)
    own = [(g.law_error.slope**2, g.law_error.law_dof) if g.law_error is not None and g.misses is not None
           and g.misses.err.size else None for g in done]
    law_prior = prior_k2(own) if prior == Prior.GROUPS else None
    return _map(_predict_job, [(j, g, law_prior) for j, g in zip(jobs, done)], titles, workers, None), consensus


def _start_method() -> str:
    """How `_map` starts its workers: fork on Linux (nothing imported again), else spawn. macOS lists fork too,
    but its system libraries may start threads that a fork does not copy, so a forked worker can crash: CPython
    spawns by default there since 3.8 (bpo-33725; vitbench.forkservers.ON_MACOS)."""
    linux = sys.platform.startswith("linux")
    return "fork" if linux and "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _map(fn: Callable, items: list, titles: list[str], workers: int,
         progress: Callable[[int, str], None] | None) -> list:
    """fn over `items` in `workers` processes, in the items' order; `progress(done, title)` after each item, and
    (in one process) after each step fn reports."""
    n = len(items)
    if workers <= 1 or n <= 1:
        out = []
        for i, (item, title) in enumerate(zip(items, titles)):
            step = (lambda what, i=i, title=title: progress(i, f"{title}: {what}")) if progress else None
            out.append(fn(item, step))
            if progress:
                progress(i + 1, title)
        return out
    ctx = multiprocessing.get_context(_start_method())
    with ProcessPoolExecutor(max_workers=min(workers, n), mp_context=ctx) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        results: list = [None] * n
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, titles[futures[fut]])
    return results


@dataclass
class FitReport:
    source: str
    source_kind: SourceKind
    spec: FitSpec
    error_label: str  # e.g. "1 - accuracy"
    split_by: list[str]  # benchmark columns + group columns
    groups: list[GroupFit]
    dropped: list[str] = field(default_factory=list)  # notes on rows left out, with the reason
    prior: dict[str, float] = field(default_factory=dict)  # form -> its score over the groups ({}: no prior)

    def to_dict(self) -> dict:
        """One JSON document (NaN-free) with everything the CLI prints."""
        return clean({
            "source": self.source, "source_kind": self.source_kind.value, "compute": self.spec.compute,
            "error": self.error_label, "split_by": self.split_by, "points": self.spec.points.value,
            "where": self.spec.where, "predict": self.spec.predict, "ci": self.spec.ci,
            "bootstrap": self.spec.bootstrap, "dropped": self.dropped,
            "prior": {"kind": self.spec.prior.value, "share": PRIOR_SHARE if self.prior else 0.0,
                      "scores": self.prior},
            "groups": [g.to_dict() for g in self.groups]})


def _fmt(v):
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def _row(series: pd.Series, mask: pd.Series) -> str:
    i = mask.to_numpy().nonzero()[0][0]
    label = series.index[i]
    return f"row {label + 1 if isinstance(label, (int, np.integer)) else label} holds {series.iloc[i]:g}"


def _error(source: Source, frame: pd.DataFrame, spec: FitSpec, where: str
           ) -> tuple[pd.Series, str, str, float | None]:
    """(error values, label, the option that chose the column, the largest value an error can take: 1 for a
    fraction, None for an unbounded loss)."""
    if spec.error and spec.accuracy:
        raise ConfigError("give --error COL or --accuracy COL, not both")
    scale = 100.0 if spec.percent else 1.0
    is_error = bool(spec.error or (spec.accuracy is None and "error" in frame.columns
                                   and source.source_kind == SourceKind.CSV))
    if is_error:
        col = spec.error or "error"
        values, label, option = numeric_column(frame, col, "--error", where) / scale, col, "--error"
        if spec.percent:  # fitted, shown and predicted as a fraction: the label says so (it read as the percent)
            label = f"{col} / 100"
    else:
        col = spec.accuracy or DEFAULT_ACCURACY
        csv = source.source_kind == SourceKind.CSV  # a column not there, not given: the default named as one
        named = "--accuracy" if spec.accuracy else \
            f"--accuracy's default, with no --error{' and no error column' if csv else ''}"
        values, option = 1.0 - numeric_column(frame, col, named, where) / scale, "--accuracy"
        label = f"1 - {col}" + (" / 100" if spec.percent else "")
    if col == spec.compute:  # error against itself: a straight line any power law fits exactly
        raise ConfigError(f"{where}: column {shorten(col, 60)} is both --compute and {option}: the error must be "
                          "another column than the compute")
    bad = values.notna() & ~np.isfinite(values.fillna(0))
    if bad.any():
        raise ConfigError(f"{where}: column {shorten(col, 60)} ({option}) is not finite: {_row(values, bad)}")
    # an error is any lower-is-better value >= 0 (a fraction, a cross-entropy, a perplexity); an accuracy, or a
    # percent, is bounded: 1 - accuracy must be a fraction
    bounded = not is_error or spec.percent
    out = values.notna() & ((values < 0) | ((values > 1) & bounded))
    if out.any():
        hint = ("0-100 (--percent)" if spec.percent else "a fraction in [0, 1] (or pass --percent for 0-100)") \
            if bounded else "a lower-is-better value >= 0 (an error, a loss, a perplexity)"
        shown = values if is_error else 1.0 - values
        raise ConfigError(f"{where}: column {shorten(col, 60)} ({option}) must be {hint}: "
                          f"{_row(shown * scale, out)}")
    return values, label, option, 1.0 if bounded else None


def fit_source(source: Source, spec: FitSpec = FitSpec(), *, workers: int | None = None,
               progress: Callable[[int, int, str], None] | None = None) -> FitReport:
    """Fit every form in `spec` to every group of `source`'s rows (`workers` processes; None: every core)."""
    where = str(source.path)
    frame = source.frame
    if spec.where:
        frame = rowsel.where(frame, spec.where, where)
    if frame.empty:
        raise ConfigError(f"{where}: no rows to fit" + (f" (--where {shorten(spec.where, 120)} kept none)"
                                                        if spec.where else ""))
    compute = numeric_column(frame, spec.compute, "--compute", where)
    bad = compute.notna() & ~np.isfinite(compute.fillna(0))
    if bad.any():
        raise ConfigError(f"{where}: column {shorten(spec.compute, 60)} (--compute) is not finite: "
                          f"{_row(compute, bad)}")
    error, error_label, option, ceiling = _error(source, frame, spec, where)
    group = spec.group if spec.group is not None else ([DEFAULT_GROUP] if DEFAULT_GROUP in frame.columns else [])
    for g in group:
        if g not in frame.columns:
            raise ConfigError(no_column(frame.columns, g, "--group", where))
    split_by = [c for c in source.benchmark_columns if c not in group] + list(group)
    usable = compute.notna() & error.notna()
    if not usable.any():
        raise ConfigError(f"{where}: no row has numbers in both {shorten(spec.compute, 60)} and {error_label!r}"
                          + (" (no fewshot/finetune rows with pre-training compute?)"
                             if source.source_kind == SourceKind.RESULTS else ""))
    dropped = []
    half = compute.notna() ^ error.notna()  # rows with one of the two: worth a note (bench rows have neither)
    if half.any():  # which kinds they are: a pretrain row's compute is its `exaflops` (--compute exaflops fits it)
        kinds = frame.loc[half, "kind"].astype(str).value_counts() if "kind" in frame.columns else None
        more = f", and {len(kinds) - 3} more kinds" if kinds is not None and len(kinds) > 3 else ""
        which = (f" ({', '.join(f'{n} {shorten(k, 40)}' for k, n in kinds.head(3).items())}{more})"
                 if kinds is not None else "")
        dropped.append(f"{int(half.sum())} rows with only one of {shorten(spec.compute, 60)} and {error_label}"
                       f"{which}")
    bad = usable & (compute <= 0)
    if bad.any():
        raise ConfigError(f"{where}: column {shorten(spec.compute, 60)} (--compute) must be > 0 for a log-scale "
                          f"fit: {_row(compute, bad)}")
    bad = usable & ((compute < 1 / COMPUTE_LIMIT) | (compute > COMPUTE_LIMIT))
    if bad.any():
        raise ConfigError(f"{where}: column {shorten(spec.compute, 60)} (--compute) must lie within "
                          f"{1 / COMPUTE_LIMIT:.0e}..{COMPUTE_LIMIT:.0e} (the laws' coefficients in its unit "
                          f"must be finite numbers): {_row(compute, bad)}; rescale it, e.g. FLOPs / 1e18 = "
                          "exaFLOPs")
    zero = usable & (error == 0)
    if zero.all() or (usable & ~zero).sum() == 0:
        raise ConfigError(f"{where}: {error_label} ({option}) is 0 in every row: a log-space fit needs error > 0")
    if zero.any():
        dropped.append(f"{int(zero.sum())} rows with {error_label} = 0 (a log-space fit needs error > 0)")
    kept = usable & ~zero
    empty = kept & rowsel.no_group(frame, group)
    if empty.any():  # a row in no group: left out with a note (it was a group of its own, "all rows")
        dropped.append(rowsel.no_group_note(frame, group, empty, kept, spec.group is not None,
                                            f"{shorten(spec.compute, 60)} and {shorten(error_label, 60)}", where))
    rows = frame[kept & ~empty].assign(_compute=compute, _error=error)
    # a point's name in plots: its model, else its group, else its data row
    name_by = "model" if "model" in rows.columns else (group[-1] if group else None)
    labels = rows[name_by].astype(str) if name_by else pd.Series([f"row {i + 1}" for i in rows.index],
                                                                   index=rows.index)
    rows = rows.assign(_label=labels)
    skip = set(split_by) | {spec.compute, spec.error, spec.accuracy, "error", DEFAULT_ACCURACY}
    jobs = []
    parts = rows.groupby(split_by, dropna=False, sort=True) if split_by else [((), rows)]
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        c, e = part["_compute"].to_numpy(float), part["_error"].to_numpy(float)
        lab = part["_label"].tolist()
        if spec.points == Points.FRONTIER:
            keep = frontier_mask(c, e)
            c, e, lab = c[keep], e[keep], [x for x, k in zip(lab, keep) if k]
        order = np.argsort(c, kind="stable")
        gkey = {col: _fmt(v) if pd.notna(v) else None for col, v in zip(split_by, key)}
        title = group_title(gkey)
        pools = rowsel.pooled(part, skip)
        notes = [rowsel.pooled_note(title, pools)] if pools else []
        check_predict(c, spec.predict, title)  # before any group is fitted (backtest_group checks it again)
        jobs.append(Job(gkey, c[order], e[order], [lab[i] for i in order], spec, notes, ceiling))
    groups, prior = fit_groups(jobs, workers, spec.prior, progress)
    return FitReport(where, source.source_kind, spec, error_label, split_by, groups, dropped,
                     {n.value: v for n, v in prior.items()})


def fit_path(path: str | Path, spec: FitSpec = FitSpec(), **kw) -> FitReport:
    """`fit_source(load_source(path), spec)`: a results directory / .jsonl or a CSV file."""
    return fit_source(load_source(path), spec, **kw)
