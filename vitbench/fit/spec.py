"""What a fit is asked to do: `FitSpec` (the `vitbench fit` options 1:1) and the defaults it declares.

A module of its own, importing no scipy and no fitting code (only the forms' names), so the command line can read
these defaults for its `--help` without paying the fit's imports (seconds on a busy machine): vitbench.fit's
package imports its other modules only when one of their names is used (vitbench/fit/__init__.py).
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from vitbench.fit.forms import FORMS, FormName

DEFAULT_COMPUTE = "pretrain_exaflops"  # the paper's x-axis (Figure 5, Table 6): pre-training exaFLOPs
DEFAULT_ACCURACY = "accuracy"
DEFAULT_GROUP = "family"
# bootstrap replicates: the least Efron & Tibshirani (1993, ch. 13) give for percentile intervals; vitbench.stats'
# 2000 resample medians, cheap, where each of these refits every law (a fit's time is mostly its replicates)
N_BOOT = 1000
CI = 0.95  # the intervals' default coverage: the paper's and the scaling-law literature's 95 %
N_CUTOFFS = 3  # backtest cut-offs: the full-reach one, then backtest.LATER later ones, then earlier ones
MAX_REACH = 10.0  # decades a backtest (--reach) or a prediction (--predict) may lie past (or before) the
# measured budgets: ten decades is past any published scaling extrapolation (Hoffmann et al. 2022 go ~2-3), and
# 10^(3 x reach), a spread cut-off's factor (backtest.SPREAD), stays a finite float
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Points(str, Enum):
    ALL = "all"
    FRONTIER = "frontier"


class Prior(str, Enum):
    """Where a group's choice of form looks besides its own backtest (vitbench.fit.backtest, "Prior")."""

    GROUPS = "groups"  # also the forms' scores over every group of the fit
    NONE = "none"  # its own backtest alone


class FitSpec(BaseModel):
    """What to fit: rows, columns, grouping, forms, the backtest and the estimator's settings (CLI options 1:1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute: str = DEFAULT_COMPUTE
    error: str | None = None  # an error column (lower is better) ...
    accuracy: str | None = None  # ... or an accuracy column (error = 1 - accuracy); neither: `accuracy`
    percent: bool = False  # the error/accuracy column is in percent (0-100)
    group: list[str] | None = None  # None: `family` where that column exists
    where: str | None = None  # a row filter (vitbench.fit.rows.where)
    forms: list[FormName] = list(FORMS)
    points: Points = Points.ALL
    predict: list[Positive] | None = None  # compute values to predict the error at
    reach: Annotated[float, Field(gt=0, le=MAX_REACH, allow_inf_nan=False)] | None = None  # backtest, decades
    cutoffs: int = Field(N_CUTOFFS, ge=1, le=10)
    bootstrap: int = Field(N_BOOT, ge=0, le=100_000)
    ci: float = Field(CI, gt=0, lt=1)
    seed: int = Field(0, ge=0, le=2**32 - 1)  # numpy SeedSequence: a non-negative integer (was a traceback)
    prior: Prior = Prior.GROUPS  # the groups' prior in each group's choice of form, or none
