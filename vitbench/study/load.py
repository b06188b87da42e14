"""Parsing a study: its YAML composed and validated (`parse_study`, `load_study`), the command line's `--set`
values applied (`apply_sets`), every problem reported at once (the package docstring, vitbench.study, says what a
study holds). Re-exported by vitbench.study."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vitbench.errors import ConfigError, VitbenchError, shorten
from vitbench.study.expand import Expander
from vitbench.study.paths import listed, read_paths, set_field
from vitbench.study.schema import MAX_TRIALS, ExecutorSpec, StudyModel
from vitbench.study.reader import SET_ORIGIN, Problems, compose, resolve_study
from vitbench.study.trials import Study, Trial, trial_key


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
    a ConfigError naming the option and the allowed fields; FIELD may be the config path it sets
    (vitbench.study.paths)."""
    for key, value in sets.items():
        field = set_field(key, option)  # a path (`upstream.lr`) sets its field (`pretrain_lr`)
        ex.err.spelled[("defaults", field)] = (SET_ORIGIN, f"{option} {key}")  # its problems named as set
        key = field
        if key not in ex.allowed:
            import difflib

            close = difflib.get_close_matches(key, ex.allowed, n=3)
            raise ConfigError(f"{option} {shorten(key)}: not a study field." + (f" Did you mean "
                              f"{', '.join(close)}?" if close else "") + f" Allowed: {listed(ex.allowed)}")
        m.defaults[key] = value
        m.axes.pop(key, None)
        for group in m.zip:
            group.pop(key, None)
        m.zip[:] = [g for g in m.zip if g]
        for entry in m.include:
            if key in entry:
                entry[key] = value


def _check_sets_read(sets: dict[str, Any], kinds: set[str], ex: Expander, option: str = "--set") -> None:
    """A field set from the command line that no trial's task reads is refused: it would change no trial (the
    keys stay those of the shipped study), and a user who pointed a study at their data would not see it."""
    for key in sets:
        field = set_field(key, option)
        read = "model" if field in ex.arch else field  # an architecture field is folded into the model
        if not any(read in ex.tasks[kind].fields() for kind in kinds):
            raise ConfigError(f"{option} {shorten(key)}: no trial of this study reads {field} (its tasks: "
                              f"{', '.join(sorted(kinds))}), so it would change nothing; `vitbench plugins --json` "
                              "lists each task's fields")


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
    read_paths(m, problems)  # `upstream.lr: ...` read as `pretrain_lr: ...`
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
        if origin == "axes" and ex.excluded(out):  # the trial as it runs matches an exclude entry
            n_combos -= 1
            continue
        version = ex.tasks[out["task"]].version
        unique.setdefault(trial_key(out, 0, version), (out, origin, version))
    if check_paths:
        problems.merge(ex.missing)
    problems.raise_if_any()
    if len(unique) * m.repeats > MAX_TRIALS:
        raise ConfigError(f"invalid study {source}: repeats: {m.repeats} x {len(unique):,} trial(s) is "
                          f"{len(unique) * m.repeats:,} trials, more than {MAX_TRIALS:,}: fewer repeats, or split "
                          "it into several studies")
    # Repeat index outermost (A B A B): slow drift of the machine spreads over all trials alike (issue 6).
    # Deterministic tasks (FLOP counts) are measured once whatever `repeats` says.
    trials = [Trial(key if r == 0 else trial_key(cfg, r, ver), cfg, r, origin)
              for r in range(m.repeats) for key, (cfg, origin, ver) in unique.items()
              if r == 0 or ex.tasks[cfg["task"]].repeat]
    if not trials:
        raise ConfigError(f"invalid study {source}: every combination was excluded; nothing to run")
    if sets:
        _check_sets_read(sets, {cfg["task"] for cfg, _, _ in unique.values()}, ex)
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
