"""The top level of a study file (pydantic; unknown keys are errors). The grid blocks (defaults, axes, zip,
include, exclude) are checked field by field against the registered tasks' parameters (vitbench.study.expand)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict


class ExecutorSpec(BaseModel):
    """Where trials run; `options` go to the executor (checked by its options model)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "local"
    options: dict[str, Any] = {}


# Combinations one study may expand to (per repeat): a sweep of 10,000 trials is already days of measuring; a
# grid of millions would take minutes and gigabytes just to expand. Trials in all, repeats counted: ten repeats of
# the largest grid (repeats of 100 million took minutes and gigabytes to expand before anything complained).
MAX_COMBINATIONS = 10_000
MAX_TRIALS = 10 * MAX_COMBINATIONS


# A trial's timeout (s), from a study or `sweep --timeout`: finite, and at least the time a trial process takes to
# start (a fork-server child: tens of ms here; 1e-7 s timed every trial out)
TimeoutS = Annotated[float, Field(ge=0.1, allow_inf_nan=False)]


class StudyModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    description: str = ""
    repeats: Annotated[int, Strict(), Field(ge=1, le=MAX_TRIALS)] = 1
    timeout_s: TimeoutS = 1800.0
    calibration: Annotated[bool, Strict()] = True
    executor: ExecutorSpec = ExecutorSpec()
    defaults: dict[str, Any] = {}
    axes: dict[str, Any] = {}
    zip: list[dict[str, Any]] = []
    include: list[dict[str, Any]] = []
    exclude: list[dict[str, Any]] = []
