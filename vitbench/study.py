"""Study files: YAML -> validated schema -> the ordered list of trials a sweep runs.

A study (see studies/*.yaml):

    name: smoke                       # results go to results/<name>/
    description: "..."
    repeats: 1                        # measure every trial this often (interleaved: A B A B, not A A B B)
    timeout_s: 300                    # per-trial wall-clock limit (spawn + build + measure)
    calibration: true                 # measure the device's matmul throughput at the start of each run
    executor: {name: local}           # where trials run (issue 7: slurm, ray), options: {...}
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

Trial fields: model, backend, task, device, resolution (null = the model's native one), batch_size, precision,
compile, seed, threads, num_classes, optimizer, channels_last; plus the parameters of the registered tasks
(vitbench.trial: warmup_steps, min_seconds, memory_limit_gib, ...). Each trial keeps only the fields its task
uses (flops ignores batch_size, so a batch-size axis never repeats a FLOP count), and its key is a SHA-256 of
that normalised config, the method versions and the repeat index: re-running a study finds its finished trials.

Everything is checked before anything runs; every problem is reported at once with file, line, field and value,
as a ConfigError (the CLI exits 2).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError

from vitbench.backends.base import BACKENDS, OPTIMIZERS, PRECISIONS
from vitbench.errors import ConfigError, UnknownModelError, VitbenchError
from vitbench.models.specs import FAMILIES, all_specs, get_spec
from vitbench.record import METHOD_VERSION

_PosInt = Annotated[int, Strict(), Field(gt=0)]
FIELD_TYPES: dict[str, Any] = {
    "model": Annotated[str, Strict()],
    "backend": Literal[BACKENDS],
    "task": Annotated[str, Strict()],
    "device": Annotated[str, Strict()],
    "resolution": _PosInt | None,
    "batch_size": _PosInt,
    "precision": Literal[PRECISIONS],
    "compile": Annotated[bool, Strict()],
    "seed": Annotated[int, Strict(), Field(ge=0)],
    "threads": _PosInt | None,
    "num_classes": _PosInt | None,
    "optimizer": Literal[OPTIMIZERS],
    "channels_last": Annotated[bool, Strict()] | None,
}
FIELD_DEFAULTS: dict[str, Any] = {
    "backend": "torch", "device": "cpu", "resolution": None, "batch_size": 8, "precision": "fp32",
    "compile": False, "seed": 0, "threads": None, "num_classes": None, "optimizer": "adam", "channels_last": None,
}
_ADAPTERS = {k: TypeAdapter(t) for k, t in FIELD_TYPES.items()}
# Frameworks a backend needs, checked without importing them (jax arrives with its own backend module).
_BACKEND_MODULES = {"torch": ("torch", "timm", "vitbench.backends.torch"),
                    "jax": ("jax", "flax", "optax", "vitbench.backends.jax")}
STUDIES_DIR = "studies"


class ExecutorSpec(BaseModel):
    """Where trials run; `options` go to the executor (e.g. partition, gpus for slurm; checked there)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "local"
    options: dict[str, Any] = {}


class StudyModel(BaseModel):
    """The top level of a study file. Axes/defaults/zip/include/exclude are checked field by field below."""

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


@dataclass(frozen=True)
class Trial:
    """One measurement to run: its normalised config, repeat index and key (the store's identity)."""

    key: str
    config: dict
    repeat: int = 0
    origin: str = "axes"  # where the combination came from: 'axes' or 'include[i]'

    @property
    def task(self) -> str:
        return self.config["task"]

    def label(self) -> str:
        c = self.config
        parts = [c["model"], c.get("backend", ""), c["task"]]
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
    backends: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)

    @property
    def unique_trials(self) -> int:
        return sum(1 for t in self.trials if t.repeat == 0)


def trial_key(config: dict, repeat: int = 0, task_version: int = 1) -> str:
    """Stable 16-hex-digit id: SHA-256 of canonical JSON of the normalised config + method versions + repeat."""
    canon = json.dumps({"config": config, "method_version": METHOD_VERSION, "task_version": task_version,
                        "repeat": repeat}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------------
# Finding and reading the file
# ---------------------------------------------------------------------------------------------------------
def embedded_studies() -> list[str]:
    """Names of the studies shipped inside the package (usable from any directory)."""
    try:
        return sorted(p.name[:-5] for p in resources.files("vitbench").joinpath(STUDIES_DIR).iterdir()
                      if p.name.endswith(".yaml"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def resolve_study(ref: str | Path) -> tuple[Path | None, str]:
    """A path, or a bare name (`smoke`): ./studies/<name>.yaml, else the package's embedded copy.

    Returns (path or None for an embedded study, text)."""
    p = Path(ref)
    if p.is_file():
        return p, p.read_text()
    if p.exists():
        raise ConfigError(f"study {str(ref)!r} is not a file")
    name = p.name[:-5] if p.name.endswith((".yaml", ".yml")) and p.parent == Path(".") else str(ref)
    if "/" not in name and "\\" not in name:
        local = Path(STUDIES_DIR) / f"{name}.yaml"
        if local.is_file():
            return local, local.read_text()
        if name in embedded_studies():
            return None, resources.files("vitbench").joinpath(STUDIES_DIR, f"{name}.yaml").read_text()
    raise ConfigError(f"study {str(ref)!r} not found: give a path to a YAML file or one of the shipped names: "
                      f"{', '.join(embedded_studies()) or '(none)'}")


class _Errors:
    """Collects (location, value, message) and formats them with file and line."""

    def __init__(self, source: str, root: yaml.Node | None):
        self.source, self.root, self.items = source, root, []

    def add(self, loc: tuple, msg: str, value: Any = ..., line_loc: tuple | None = None) -> None:
        self.items.append((tuple(loc), value, msg, line_loc))

    def line(self, loc: tuple) -> int | None:
        node, line = self.root, None
        if node is None:
            return None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                        node, line = v, v.start_mark.line + 1
                        break
                else:
                    break
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line

    def raise_if_any(self) -> None:
        if not self.items:
            return
        lines = []
        for loc, value, msg, line_loc in self.items:
            ln = self.line(line_loc or loc)
            where = f"{self.source}:{ln}" if ln else self.source
            field_ = _dotted(loc) or "(top level)"
            got = "" if value is ... else f" (got {value!r})"
            lines.append(f"{where}: {field_}: {msg}{got}")
        head = f"invalid study {self.source} ({len(lines)} problem{'s' if len(lines) > 1 else ''}):\n  "
        raise ConfigError(head + "\n  ".join(lines))


def _dotted(loc: tuple) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# ---------------------------------------------------------------------------------------------------------
# Validation and expansion
# ---------------------------------------------------------------------------------------------------------
def _task_param_types() -> dict[str, list[TypeAdapter]]:
    """Task parameter -> the types tasks declare for it (a value is valid here if one accepts it; each task
    checks its own type when the trial is normalised)."""
    from vitbench.trial import tasks

    out: dict[str, list[TypeAdapter]] = {}
    for td in tasks().values():
        for p, (typ, _default) in td.params.items():
            out.setdefault(p, []).append(TypeAdapter(typ))
    return out


def _models_for(value: str) -> list[str]:
    """A model name or selector -> canonical names. Selectors: family:<f> (paper variants), tiny:<f|all>."""
    if ":" in value:
        kind, fam = (s.strip() for s in value.split(":", 1))
        if kind not in ("family", "tiny"):
            raise UnknownModelError(f"unknown selector {kind!r}; use family:<{'|'.join(FAMILIES)}> or "
                                    f"tiny:<{'|'.join(FAMILIES)}|all>")
        if kind == "tiny":
            specs = [s for s in all_specs(None if fam == "all" else fam) if s.tiny]
        else:
            specs = all_specs(fam, include_tiny=False)
        return [s.name for s in specs]
    return [get_spec(value).name]


class _Expander:
    def __init__(self, m: StudyModel, errors: _Errors):
        from vitbench.trial import tasks

        self.m, self.err = m, errors
        self.tasks = tasks()
        self.params = _task_param_types()
        self.allowed = list(FIELD_TYPES) + sorted(self.params)

    # -- single values -------------------------------------------------------------------------------------
    def check_key(self, key: str, loc: tuple) -> bool:
        if key in FIELD_TYPES or key in self.params:
            return True
        import difflib

        close = difflib.get_close_matches(key, self.allowed, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        self.err.add(loc, f"unknown field {key!r}.{hint} Allowed: {', '.join(self.allowed)}")
        return False

    def value(self, key: str, v: Any, loc: tuple) -> list[Any] | None:
        """Validate one value of `key`; returns its normalised expansion (model selectors -> many) or None."""
        if isinstance(v, (list, dict)):
            self.err.add(loc, "expected a single value here, not a " + type(v).__name__, v)
            return None
        adapters = [_ADAPTERS[key]] if key in _ADAPTERS else self.params[key]
        problems = []
        for adapter in adapters:
            try:
                v = adapter.validate_python(v)
                break
            except ValidationError as e:
                problems.append("; ".join(x["msg"] for x in e.errors()))
        else:
            self.err.add(loc, " or ".join(dict.fromkeys(problems)), v)
            return None
        if key == "model":
            try:
                return _models_for(v)
            except VitbenchError as e:
                self.err.add(loc, str(e), v)
                return None
        if key == "task" and v not in self.tasks:
            self.err.add(loc, f"unknown task; allowed: {', '.join(self.tasks)}", v)
            return None
        if key == "backend":
            missing = [mod for mod in _BACKEND_MODULES.get(v, ()) if importlib.util.find_spec(mod) is None]
            if missing:
                self.err.add(loc, f"backend {v!r} is not available here (missing {', '.join(missing)})", v)
                return None
        return [v]

    def values(self, key: str, vs: Any, loc: tuple, allow_scalar: bool = True) -> list[tuple[Any, tuple]] | None:
        """A list of values (a scalar counts as a one-item list) -> [(value, loc)], selectors expanded."""
        if not isinstance(vs, list):
            if not allow_scalar:
                self.err.add(loc, "expected a list", vs)
                return None
            vs, single = [vs], True
        else:
            single = False
        if not vs:
            self.err.add(loc, "empty list: give at least one value (or remove the field)")
            return None
        out: list[tuple[Any, tuple]] = []
        for i, v in enumerate(vs):
            vloc = loc if single else (*loc, i)
            got = self.value(key, v, vloc)
            if got is not None:
                if not got:
                    self.err.add(vloc, "selector matches no model", v)
                out.extend((g, vloc) for g in got)
        return out

    # -- the study -----------------------------------------------------------------------------------------
    def expand(self) -> tuple[list[tuple[dict, dict, str]], int]:
        m = self.m
        base: dict[str, tuple[Any, tuple | None]] = {k: (v, None) for k, v in FIELD_DEFAULTS.items()}
        for k, v in m.defaults.items():
            if self.check_key(k, ("defaults", k)):
                got = self.value(k, v, ("defaults", k))
                if got is not None:
                    if len(got) != 1:
                        self.err.add(("defaults", k), "a selector names several models: use axes.model", v)
                    else:
                        base[k] = (got[0], ("defaults", k))

        axes: dict[str, list[tuple[Any, tuple]]] = {}
        for k, vs in m.axes.items():
            if self.check_key(k, ("axes", k)):
                got = self.values(k, vs, ("axes", k))
                if got is not None:
                    axes[k] = got

        groups: list[tuple[tuple[str, ...], list[tuple[tuple[Any, tuple], ...]]]] = []
        for g, group in enumerate(m.zip):
            loc = ("zip", g)
            if not group:
                self.err.add(loc, "empty zip group")
                continue
            cols, ok = {}, True
            for k, vs in group.items():
                if not self.check_key(k, (*loc, k)):
                    ok = False
                    continue
                if k in m.axes:
                    self.err.add((*loc, k), f"{k!r} is both an axis and in a zip group; keep one")
                    ok = False
                    continue
                got = self.values(k, vs, (*loc, k), allow_scalar=False)
                if got is None:
                    ok = False
                    continue
                if k == "model" and len(got) != len(vs):
                    self.err.add((*loc, k), "selectors cannot be zipped (they expand to several models)", vs)
                    ok = False
                    continue
                cols[k] = got
            lengths = {k: len(v) for k, v in cols.items()}
            if ok and len(set(lengths.values())) > 1:
                self.err.add(loc, f"zipped lists must have equal lengths, got {lengths}")
                ok = False
            if ok and cols:
                keys = tuple(cols)
                groups.append((keys, list(zip(*cols.values()))))

        excludes = []
        for i, ex in enumerate(m.exclude):
            spec = {}
            for k, vs in ex.items():
                if self.check_key(k, ("exclude", i, k)):
                    got = self.values(k, vs, ("exclude", i, k))
                    if got is not None:
                        spec[k] = {v for v, _ in got}
            if not ex:
                self.err.add(("exclude", i), "empty exclude entry (it would drop everything)")
            excludes.append(spec)

        combos: list[tuple[dict, dict, str]] = []
        grid = self._product(axes, groups)
        if not m.axes and not m.zip and not m.include:
            self.err.add(("axes",), "the study has no axes, zip or include: nothing to run")
        for values, locs in grid:
            if any(all(values.get(k, base.get(k, (None,))[0]) in allowed for k, allowed in ex.items())
                   for ex in excludes if ex):
                continue
            combos.append((values, locs, "axes"))
        for i, inc in enumerate(m.include):
            loc = ("include", i)
            if not inc:
                self.err.add(loc, "empty include entry")
                continue
            own: dict[str, list[tuple[Any, tuple]]] = {}
            for k, vs in inc.items():
                if self.check_key(k, (*loc, k)):
                    got = self.values(k, vs, (*loc, k))
                    if got is not None:
                        own[k] = got
            if len(own) != len(inc):
                continue
            sub_axes = {k: v for k, v in axes.items() if k not in own}
            sub_groups = [(ks, rows) for ks, rows in groups if not set(ks) & set(own)]
            for values, locs in self._product({**sub_axes, **own}, sub_groups):
                combos.append((values, locs, f"include[{i}]"))
        merged = []
        for values, locs, origin in combos:
            cfg = {k: v for k, (v, _) in base.items()}
            org = {k: l for k, (_, l) in base.items()}
            cfg.update(values)
            org.update(locs)
            merged.append((cfg, org, origin))
        return merged, len(merged)

    @staticmethod
    def _product(axes: dict[str, list[tuple[Any, tuple]]], groups) -> list[tuple[dict, dict]]:
        dims: list[list[tuple[dict, dict]]] = []
        for k, vals in axes.items():
            dims.append([({k: v}, {k: loc}) for v, loc in vals])
        for keys, rows in groups:
            dims.append([({k: v for k, (v, _) in zip(keys, row)}, {k: loc for k, (_, loc) in zip(keys, row)})
                         for row in rows])
        out = []
        for combo in itertools.product(*dims):
            values, locs = {}, {}
            for v, loc in combo:
                values.update(v)
                locs.update(loc)
            out.append((values, locs))
        return out

    def normalise(self, cfg: dict, org: dict, origin: str) -> dict | None:
        """Keep the fields the task uses, fill its parameter defaults, resolve native resolution/classes."""
        for req in ("model", "task"):
            if cfg.get(req) is None:
                self.err.add(("axes",), f"no {req} given: set axes.{req} (or defaults.{req})")
                return None
        td = self.tasks[cfg["task"]]
        spec = get_spec(cfg["model"])
        out = {f: cfg.get(f) for f in td.fields}
        for p, (typ, default) in td.params.items():
            if p in cfg:
                try:
                    out[p] = TypeAdapter(typ).validate_python(cfg[p])
                except ValidationError as e:
                    self.err.add(org.get(p) or (p,), f"for task {td.name!r}: "
                                 + "; ".join(x["msg"] for x in e.errors()), cfg[p])
                    return None
            else:
                out[p] = default
        if "resolution" in out:
            res = out["resolution"] or spec.resolution
            try:
                spec.check_resolution(res)
            except VitbenchError as e:
                where = org.get("resolution") or org.get("model") or ("axes",)
                self.err.add(where, f"{e} (model {spec.name} from {_dotted(org.get('model') or ())}, {origin})",
                             res)
                return None
            out["resolution"] = res
        if "num_classes" in out and out["num_classes"] is None:
            out["num_classes"] = spec.num_classes
        return out


def _compose(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"invalid study {where}: not valid YAML: {problem}") from None
    _no_duplicate_keys(node, source)
    return data, node


def _no_duplicate_keys(node: yaml.Node | None, source: str) -> None:
    """YAML lets a repeated key silently replace the earlier one (a second `axes:` would drop the first)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                line = k.start_mark.line + 1
                if k.value in seen:
                    raise ConfigError(f"invalid study {source}:{line}: duplicate key {k.value!r} (first on line "
                                      f"{seen[k.value]}); YAML would silently keep only the last one")
                seen[k.value] = line
            _no_duplicate_keys(v, source)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_duplicate_keys(item, source)


def _check_executor(spec: ExecutorSpec, errors: _Errors) -> None:
    """The executor block names a registered executor and only options it takes (checked without importing
    submitit or ray)."""
    from vitbench.executors import EXECUTORS, executor_class

    if spec.name not in EXECUTORS:
        errors.add(("executor", "name"), f"unknown executor; allowed: {', '.join(EXECUTORS)}", spec.name)
        return
    try:
        executor_class(spec.name).check_options(spec.options)
    except VitbenchError as e:
        errors.add(("executor", "options"), str(e))


def parse_study(text: str, source: str = "<study>", path: Path | None = None) -> Study:
    """Validate a study's YAML text and expand it into trials (raises ConfigError listing every problem)."""
    data, node = _compose(text, source)
    errors = _Errors(source, node)
    if not isinstance(data, dict):
        raise ConfigError(f"invalid study {source}: the top level must be a mapping with name, axes, ... "
                          f"(got {type(data).__name__})")
    try:
        m = StudyModel.model_validate(data)
    except ValidationError as e:
        for x in e.errors():
            loc = tuple(x["loc"])
            msg = x["msg"]
            if x["type"] == "extra_forbidden":
                allowed = ", ".join(StudyModel.model_fields if len(loc) == 1 else ExecutorSpec.model_fields)
                msg = f"unknown key; allowed: {allowed}"
            errors.add(loc, msg, x.get("input", ...) if x["type"] != "missing" else ...)
        # Go on without the broken top-level entries, so one run reports every problem.
        bad = {x["loc"][0] for x in e.errors() if x["loc"]}
        try:
            m = StudyModel.model_validate({k: v for k, v in data.items() if k not in bad or k == "name"})
        except ValidationError:
            errors.raise_if_any()
    _check_executor(m.executor, errors)
    ex = _Expander(m, errors)
    merged, n_combos = ex.expand()
    errors.raise_if_any()
    unique: dict[str, tuple[dict, str, int]] = {}
    for cfg, org, origin in merged:
        out = ex.normalise(cfg, org, origin)
        if out is None:
            continue
        td = ex.tasks[out["task"]]
        k0 = trial_key(out, 0, td.version)
        unique.setdefault(k0, (out, origin, td.version))
    errors.raise_if_any()
    # Repeat index outermost (A B A B): slow drift of the machine spreads over all trials alike (issue 6).
    # Deterministic tasks (FLOP counts) are measured once whatever `repeats` says.
    trials = [Trial(trial_key(cfg, r, ver), cfg, r, origin)
              for r in range(m.repeats) for cfg, origin, ver in unique.values()
              if r == 0 or ex.tasks[cfg["task"]].repeat]
    sha = hashlib.sha256(text.encode()).hexdigest()
    study = Study(
        name=m.name, description=m.description, path=path, text=text, sha=sha, repeats=m.repeats,
        timeout_s=m.timeout_s, calibration=m.calibration, executor=m.executor, trials=trials,
        combinations=n_combos,
        backends=tuple(dict.fromkeys(t.config["backend"] for t in trials)),
        devices=tuple(dict.fromkeys(t.config.get("device", "cpu") for t in trials)),
    )
    if not trials:
        raise ConfigError(f"invalid study {source}: every combination was excluded; nothing to run")
    return study


def load_study(ref: str | Path) -> Study:
    """Find (path or shipped name), read, validate and expand a study."""
    path, text = resolve_study(ref)
    source = str(path) if path else f"<shipped study {ref}>"
    return parse_study(text, source, path)
