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


class StudyModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    description: str = ""
    repeats: Annotated[int, Strict(), Field(ge=1)] = 1
    timeout_s: Annotated[float, Field(gt=0)] = 1800.0
    calibration: Annotated[bool, Strict()] = True
    executor: ExecutorSpec = ExecutorSpec()
    defaults: dict[str, Any] = {}
    axes: dict[str, Any] = {}
    zip: list[dict[str, Any]] = []
    include: list[dict[str, Any]] = []
    exclude: list[dict[str, Any]] = []
