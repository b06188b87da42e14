"""Study files: YAML -> validated schema -> the ordered list of trials a sweep runs.

A study (see studies/*.yaml):

    name: smoke                       # results go to results/<name>/
    description: "..."
    repeats: 1                        # measure every trial this often (interleaved: A B A B, not A A B B)
    timeout_s: 300                    # per-trial wall-clock limit (spawn + build + measure)
    calibration: true                 # measure the device's matmul throughput at the start of each run
    executor: {name: local}           # where trials run (see `vitbench plugins`), options: {...}
    defaults:                         # trial fields and task parameters for every trial (scalars)
      device: cpu
      min_seconds: 0.5
    axes:                             # the grid: every combination of these lists
      model: [ViT-Nano/4, "tiny:bit"] # names, aliases or selectors family:<vit|bit|hybrid>, tiny:<family|all>
      task: [infer, train, max_batch, flops]
      resolution: [32, 64]
    zip:                              # lists of equal length varied together (one grid axis per group)
      - {model: [ViT-B/16, ViT-L/16], batch_size: [64, 32]}
    exclude:                          # drop grid combinations matching every field given (lists: any of)
      - {model: R-Nano, resolution: 64}
    include:                          # extra combinations: the fields given replace those axes, the other
      - {model: ViT-H/14, resolution: [224, 448]}   # axes still apply (a zip group it touches is dropped)

The fields a study may set, their types and defaults are the registered tasks' parameters (vitbench.tasks;
`vitbench plugins` lists them). Each trial keeps only the fields its task uses (flops ignores batch_size, so a
batch-size axis never repeats a FLOP count), and its key is a SHA-256 of that normalised config, the method
versions and the repeat index: re-running a study finds its finished trials.

Everything is checked before anything runs; every problem is reported at once with file, line, field and value,
as a ConfigError (the CLI exits 2).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from pydantic import ValidationError

from vitbench.errors import ConfigError, VitbenchError, shorten
from vitbench.record import METHOD_VERSION
from vitbench.study.expand import Expander
from vitbench.study.schema import ExecutorSpec, StudyModel
from vitbench.study.source import Problems, compose, embedded_studies, resolve_study

__all__ = ["Study", "Trial", "embedded_studies", "load_study", "parse_study", "resolve_study", "trial_key"]


@dataclass(frozen=True)
class Trial:
    """One measurement to run: its normalised config, repeat index and key (the store's identity)."""

    key: str
    config: dict
    repeat: int = 0
    origin: str = "axes"  # where the combination came from: 'axes', 'include[i]', or a run's 'calibration'

    @property
    def task(self) -> str:
        return self.config["task"]

    def label(self) -> str:
        c = self.config
        parts = [c.get("model", ""), c.get("backend", ""), c["task"]]
        if c.get("resolution"):
            parts.append(f"{c['resolution']}px")
        if "batch_size" in c:
            parts.append(f"b{c['batch_size']}")
        if "precision" in c and c["precision"] != "fp32":
            parts.append(c["precision"])
        if c.get("compile"):
            parts.append("compiled")
        if self.repeat:
            parts.append(f"rep{self.repeat}")
        return " ".join(str(p) for p in parts if p != "")


@dataclass
class Study:
    """A validated study: its source and the ordered trials (repeat index outermost: A B A B)."""

    name: str
    description: str
    path: Path | None
    text: str
    sha: str
    repeats: int
    timeout_s: float
    calibration: bool
    executor: ExecutorSpec
    trials: list[Trial]
    combinations: int = 0  # grid + include combinations before de-duplication (per repeat)
    missing_paths: str = ""  # the problems of paths that do not exist, when parsed with check_paths=False

    @property
    def unique_trials(self) -> int:
        return sum(1 for t in self.trials if t.repeat == 0)


def trial_key(config: dict, repeat: int = 0, task_version: int = 1) -> str:
    """Stable 16-hex-digit id: SHA-256 of canonical JSON of the normalised config + method versions + repeat."""
    canon = json.dumps({"config": config, "method_version": METHOD_VERSION, "task_version": task_version,
                        "repeat": repeat}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def _check_executor(spec: ExecutorSpec, problems: Problems) -> None:
    """The executor block names a registered executor and only options it takes (checked without importing
    the executor's cluster libraries)."""
    from vitbench.registry import Kind, names
    from vitbench.registry import get as get_plugin

    if spec.name not in names(Kind.EXECUTOR):
        problems.add(("executor", "name"), f"unknown executor; allowed: {', '.join(names(Kind.EXECUTOR))}",
                     spec.name)
        return
    try:
        get_plugin(Kind.EXECUTOR, spec.name).check_options(spec.options)
    except VitbenchError as e:
        problems.add(("executor", "options"), str(e))


def _top_level(data: dict, problems: Problems) -> StudyModel:
    """The study's top level; broken entries are reported and left out, so one run reports every problem."""
    try:
        return StudyModel.model_validate(data)
    except ValidationError as e:
        for x in e.errors():
            loc = tuple(x["loc"])
            msg = x["msg"]
            if x["type"] == "extra_forbidden":
                allowed = ", ".join(StudyModel.model_fields if len(loc) == 1 else ExecutorSpec.model_fields)
                msg = f"unknown key; allowed: {allowed}"
            problems.add(loc, msg, x.get("input", ...) if x["type"] != "missing" else ...)
        bad = {x["loc"][0] for x in e.errors() if x["loc"]}
        try:
            return StudyModel.model_validate({k: v for k, v in data.items() if k not in bad or k == "name"})
        except ValidationError:
            problems.raise_if_any()
            raise


def apply_sets(m: StudyModel, ex: Expander, sets: dict[str, Any], option: str = "--set") -> None:
    """Set study fields from the command line (`vitbench sweep STUDY --set FIELD=VALUE`): FIELD takes VALUE in
    every trial (its default, and in place of an axis, a zip column or an include entry's value), so a shipped
    study runs on a user's data without editing it; the trial keys follow from the configs. An unknown field is
    a ConfigError naming the option and the allowed fields."""
    for key, value in sets.items():
        if key not in ex.allowed:
            import difflib

            close = difflib.get_close_matches(key, ex.allowed, n=3)
            raise ConfigError(f"{option} {shorten(key)}: not a study field." + (f" Did you mean "
                              f"{', '.join(close)}?" if close else "") + f" Allowed: {', '.join(ex.allowed)}")
        m.defaults[key] = value
        m.axes.pop(key, None)
        for group in m.zip:
            group.pop(key, None)
        m.zip[:] = [g for g in m.zip if g]
        for entry in m.include:
            if key in entry:
                entry[key] = value


def parse_study(text: str, source: str = "<study>", path: Path | None = None, check_paths: bool = True,
                sets: dict[str, Any] | None = None) -> Study:
    """Validate a study's YAML text and expand it into trials (raises ConfigError listing every problem).

    Fields naming local files (data, checkpoints) must exist; with `check_paths=False` (a dry run of a template
    whose data lives elsewhere) the study is returned with those problems in `missing_paths` instead.
    `sets`: fields set from the command line (apply_sets)."""
    data, node = compose(text, source)
    problems = Problems(source, node)
    if not isinstance(data, dict):
        raise ConfigError(f"invalid study {source}: the top level must be a mapping with name, axes, ... "
                          f"(got {type(data).__name__})")
    m = _top_level(data, problems)
    _check_executor(m.executor, problems)
    ex = Expander(m, problems)
    if sets:
        apply_sets(m, ex, sets)
        # the study as run: its text says what the command line set (saved with the results; in its sha)
        text = text.rstrip("\n") + "\n# set on the command line (vitbench sweep --set):\n" + "".join(
            f"#   {k}={json.dumps(v)}\n" for k, v in sets.items())
    merged, n_combos = ex.expand()
    unique: dict[str, tuple[dict, str, int]] = {}
    for cfg, org, origin in merged:
        out = ex.normalise(cfg, org, origin)
        if out is None:
            continue
        version = ex.tasks[out["task"]].version
        unique.setdefault(trial_key(out, 0, version), (out, origin, version))
    if check_paths:
        problems.merge(ex.missing)
    problems.raise_if_any()
    # Repeat index outermost (A B A B): slow drift of the machine spreads over all trials alike (issue 6).
    # Deterministic tasks (FLOP counts) are measured once whatever `repeats` says.
    trials = [Trial(key if r == 0 else trial_key(cfg, r, ver), cfg, r, origin)
              for r in range(m.repeats) for key, (cfg, origin, ver) in unique.items()
              if r == 0 or ex.tasks[cfg["task"]].repeat]
    if not trials:
        raise ConfigError(f"invalid study {source}: every combination was excluded; nothing to run")
    missing = ""
    if ex.missing.items:
        try:
            ex.missing.raise_if_any()
        except ConfigError as e:
            missing = str(e)
    return Study(name=m.name, description=m.description, path=path, text=text,
                 sha=hashlib.sha256(text.encode()).hexdigest(), repeats=m.repeats, timeout_s=m.timeout_s,
                 calibration=m.calibration, executor=m.executor, trials=trials, combinations=n_combos,
                 missing_paths=missing)


def load_study(ref: str | Path, check_paths: bool = True, sets: dict[str, Any] | None = None) -> Study:
    """Find (path or shipped name), read, validate and expand a study (see parse_study for `check_paths` and
    `sets`)."""
    path, text = resolve_study(ref)
    source = str(path) if path else f"<shipped study {ref}>"
    return parse_study(text, source, path, check_paths, sets)
