"""Fits per group: choose the columns, split the rows, fit every form to every group, one JSON-able report.

A results source is always split by its benchmark (kind, dataset, shots: few-shot k and fine-tune are
different metrics) and then by `group` (default `family`); a CSV only by `group` (default `family` if it has
that column, else one group). Error is `error`, or 1 - `accuracy`; `percent` says the column is 0-100.
`points`: `all` fits every row; `frontier` only the rows no cheaper row beats (the compute-optimal
envelope, what Zhai et al. 2022 fit when a group holds several model sizes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from vitbench.errors import ConfigError
from vitbench.fit.estimate import HOLDOUT_FRACTION, N_BOOT, CurveFit, fit_curve, holdout_check
from vitbench.fit.forms import FORMS, FormName
from vitbench.fit.source import Source, SourceKind, load_source, numeric_column
from vitbench.record import clean
from vitbench.stats import frontier_mask

DEFAULT_COMPUTE = "pretrain_exaflops"  # the paper's x-axis (Figure 5, Table 6): pre-training exaFLOPs
DEFAULT_ACCURACY = "accuracy"
DEFAULT_GROUP = "family"


class Points(str, Enum):
    ALL = "all"
    FRONTIER = "frontier"


class FitSpec(BaseModel):
    """What to fit: columns, grouping, forms and the estimator's settings (CLI options map 1:1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute: str = DEFAULT_COMPUTE
    error: str | None = None  # an error column (lower is better) ...
    accuracy: str | None = None  # ... or an accuracy column (error = 1 - accuracy); neither: `accuracy`
    percent: bool = False  # the error/accuracy column is in percent (0-100)
    group: list[str] | None = None  # None: `family` where that column exists
    forms: list[FormName] = list(FORMS)
    points: Points = Points.ALL
    holdout: float = Field(HOLDOUT_FRACTION, gt=0, lt=1)
    bootstrap: int = Field(N_BOOT, ge=0)
    ci: float = Field(0.95, gt=0, lt=1)
    seed: int = 0


@dataclass
class GroupFit:
    key: dict[str, object]  # column -> value for this group (benchmark columns first; None: missing)
    compute: np.ndarray
    error: np.ndarray
    labels: list[str]  # per point: its model, else its group value, else "row N"
    fits: list[CurveFit] = field(default_factory=list)

    @property
    def title(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.key.items() if v is not None) or "all rows"

    def fit(self, form: FormName) -> CurveFit | None:
        return next((f for f in self.fits if f.form.name == form), None)

    def best(self) -> CurveFit | None:
        """The form to extrapolate with: the lowest held-out error (Alabdulmohsin et al. 2022 judge scaling
        laws by extrapolation); where no held-out check ran, the fitted form with the fewest parameters."""
        ok = [f for f in self.fits if f.ok]
        checked = [f for f in ok if f.heldout is not None and f.heldout.abs_err_mean is not None]
        if checked:
            # errors equal to 6 digits are a tie, won by the simpler form
            return min(checked, key=lambda f: (float(f"{f.heldout.abs_err_mean:.6g}"), f.form.n_params))
        return min(ok, key=lambda f: f.form.n_params, default=None)

    def to_dict(self) -> dict:
        return {"group": dict(self.key),
                "n_points": len(self.compute),
                "compute_range": [float(self.compute.min()), float(self.compute.max())],
                "error_range": [float(self.error.min()), float(self.error.max())],
                "best_form": best.form.name.value if (best := self.best()) else None,
                "fits": [f.to_dict() for f in self.fits]}


@dataclass
class FitReport:
    source: str
    source_kind: SourceKind
    spec: FitSpec
    error_label: str  # e.g. "1 - accuracy"
    split_by: list[str]  # benchmark columns + group columns
    groups: list[GroupFit]
    dropped: list[str] = field(default_factory=list)  # notes on rows left out, with the reason

    def to_dict(self) -> dict:
        """One JSON document (NaN-free) with everything the CLI prints."""
        return clean({
            "source": self.source, "source_kind": self.source_kind.value, "compute": self.spec.compute,
            "error": self.error_label, "split_by": self.split_by, "points": self.spec.points.value,
            "ci": self.spec.ci, "bootstrap": self.spec.bootstrap, "holdout_fraction": self.spec.holdout,
            "dropped": self.dropped, "groups": [g.to_dict() for g in self.groups]})


def _present(v) -> bool:
    return bool(pd.notna(v))


def _fmt(v):
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def _error(source: Source, spec: FitSpec, where: str) -> tuple[pd.Series, str]:
    frame = source.frame
    if spec.error and spec.accuracy:
        raise ConfigError("give --error COL or --accuracy COL, not both")
    scale = 100.0 if spec.percent else 1.0
    if spec.error:
        return numeric_column(frame, spec.error, "--error", where) / scale, spec.error
    if spec.accuracy is None and "error" in frame.columns and source.kind == SourceKind.CSV:
        return numeric_column(frame, "error", "--error", where) / scale, "error"
    col = spec.accuracy or DEFAULT_ACCURACY
    acc = numeric_column(frame, col, "--accuracy", where) / scale
    if ((acc.dropna() > 1) | (acc.dropna() < 0)).any():
        raise ConfigError(f"{where}: column {col!r} (--accuracy) has values outside [0, 1] (min {acc.min():g}, "
                          f"max {acc.max():g}); accuracy is a fraction in [0, 1], or pass --percent for 0-100")
    return 1.0 - acc, f"1 - {col}"


def fit_source(source: Source, spec: FitSpec = FitSpec()) -> FitReport:
    """Fit every form in `spec` to every group of `source`'s rows."""
    where = str(source.path)
    frame = source.frame
    if frame.empty:
        raise ConfigError(f"{where}: no rows to fit")
    compute = numeric_column(frame, spec.compute, "--compute", where)
    error, error_label = _error(source, spec, where)
    group = spec.group if spec.group is not None else ([DEFAULT_GROUP] if DEFAULT_GROUP in frame.columns else [])
    for g in group:
        if g not in frame.columns:
            raise ConfigError(f"{where}: no column {g!r} (--group); columns: {', '.join(map(str, frame.columns))}")
    split_by = [c for c in source.benchmark_columns if c not in group] + list(group)
    usable = compute.notna() & error.notna()
    if not usable.any():
        raise ConfigError(f"{where}: no row has numbers in both {spec.compute!r} and {error_label!r}"
                          + (" (no fewshot/finetune rows with pre-training compute?)"
                             if source.kind == SourceKind.RESULTS else ""))
    dropped = []
    half = compute.notna() ^ error.notna()  # rows with one of the two: worth a note (bench rows have neither)
    if half.any():
        dropped.append(f"{int(half.sum())} rows with only one of {spec.compute} and {error_label}")
    bad = usable & (compute <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"{where}: column {spec.compute!r} (--compute) must be > 0 for a log-scale fit; "
                          f"row {i + 1} holds {compute.iloc[i]:g}")
    if (usable & (error < 0)).any():
        raise ConfigError(f"{where}: {error_label} is negative in some rows; error must be in [0, 1]")
    zero = usable & (error == 0)
    if zero.any():
        dropped.append(f"{int(zero.sum())} rows with {error_label} = 0 (a log-space fit needs error > 0)")
    rows = frame[usable & ~zero].assign(_compute=compute, _error=error)
    # a point's name in plots: its model, else its group, else its data row
    name_by = "model" if "model" in rows.columns else (group[-1] if group else None)
    labels = rows[name_by].astype(str) if name_by else pd.Series([f"row {i + 1}" for i in rows.index],
                                                                   index=rows.index)
    rows = rows.assign(_label=labels)
    groups: list[GroupFit] = []
    parts = rows.groupby(split_by, dropna=False, sort=True) if split_by else [((), rows)]
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        c, e = part["_compute"].to_numpy(float), part["_error"].to_numpy(float)
        lab = part["_label"].tolist()
        if spec.points == Points.FRONTIER:
            keep = frontier_mask(c, e)
            c, e, lab = c[keep], e[keep], [x for x, k in zip(lab, keep) if k]
        gf = GroupFit({col: _fmt(v) if _present(v) else None for col, v in zip(split_by, key)}, c, e, lab)
        for form in spec.forms:
            cf = fit_curve(c, e, form, bootstrap=spec.bootstrap, ci=spec.ci, seed=spec.seed)
            cf.heldout = holdout_check(c, e, form, fraction=spec.holdout)
            gf.fits.append(cf)
        groups.append(gf)
    return FitReport(where, source.kind, spec, error_label, split_by, groups, dropped)


def fit_path(path: str | Path, spec: FitSpec = FitSpec()) -> FitReport:
    """`fit_source(load_source(path), spec)`: a results directory / .jsonl or a CSV file."""
    return fit_source(load_source(path), spec)
