"""Scaling-law fits: error vs compute per group, with bootstrap CIs and a held-out check (docs/scaling-laws.md).

    from vitbench.fit import FitSpec, fit_path
    report = fit_path("results/transfer-digits", FitSpec(compute="pretrain_exaflops"))
    report.to_dict()           # the JSON `vitbench fit --json` prints
"""

from vitbench.fit.estimate import CurveFit, FitStatus, HeldOut, ParamEstimate, fit_curve, holdout_check
from vitbench.fit.forms import FORMS, PARAMS, Form, FormName
from vitbench.fit.groups import FitReport, FitSpec, GroupFit, Points, fit_path, fit_source
from vitbench.fit.source import BENCHMARK_COLUMNS, Source, SourceKind, load_source, results_frame
from vitbench.stats import frontier_mask

__all__ = ["BENCHMARK_COLUMNS", "FORMS", "PARAMS", "CurveFit", "FitReport", "FitSpec", "FitStatus", "Form",
           "FormName", "GroupFit", "HeldOut", "ParamEstimate", "Points", "Source", "SourceKind", "fit_curve",
           "fit_path", "fit_source", "frontier_mask", "holdout_check", "load_source", "results_frame"]
