"""Scaling-law fits: error vs compute per group, a backtest at the user's reach, predictions.

See docs/scaling-laws.md.

    from vitbench.fit import FitSpec, fit_path
    report = fit_path("results/transfer-digits", FitSpec(compute="pretrain_exaflops", predict=[1e-5]))
    report.to_dict()           # the JSON `vitbench fit --json` prints

The names below are imported from their modules when first used (PEP 562): the settings (vitbench.fit.spec)
cost no scipy, so the command line reads their defaults without the fitting code's imports.
"""

from __future__ import annotations

import importlib

_EXPORTS = {  # name -> the module that declares it
    "backtest": ("Backtest", "FormBacktest", "choose", "run_backtest"),
    "combine": ("Combined",),
    "estimate": ("CurveFit", "FitStatus", "ParamEstimate", "fit_curve"),
    "forms": ("FORMS", "Form", "FormName"),
    "groups": ("FitReport", "GroupFit", "Job", "fit_group", "fit_groups", "fit_path", "fit_source"),
    "predict": ("Prediction",),
    "spec": ("FitSpec", "Points", "Prior"),
    "table": ("BENCHMARK_COLUMNS", "Source", "SourceKind", "load_source", "results_frame"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_WHERE, "frontier_mask"])


def __getattr__(name: str):
    if name == "frontier_mask":
        from vitbench.stats import frontier_mask

        return frontier_mask
    module = _WHERE.get(name)
    if module is None:  # not ours: Python then looks for a submodule of that name (`from vitbench.fit import x`)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
