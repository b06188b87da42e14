"""A validated study -> combinations of field values -> one normalised trial config per combination.

Which fields exist, their types and their defaults come from the registered tasks' Params (vitbench.tasks):
a value in `defaults`, `axes`, `zip`, `include` or `exclude` must be valid for some task that declares the field;
each combination is then normalised by its own task's Params (fields the task does not use are dropped), and the
backend it names must provide what the task needs. Every problem is collected with its location.

Architecture fields (vitbench.models.overrides: depth, width, mlp_dim, heads, patch, classifier, rep_size,
posemb, posemb_at, width_factor, blocks) may be set like any field; each is checked alone when read, and at
normalisation they are folded into the trial's model, whose canonical name then carries them
(`ViT-Mini/4` + `depth: 4` -> `ViT-Mini/4[depth=4]`): the trial config, its key, the checkpoints and the report
see one model name, and a trial that sets none keeps its key. `null` leaves the row's value.
"""

from __future__ import annotations

import difflib
import itertools
import math
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from vitbench.backends.base import backend_spec
from vitbench.errors import ConfigError, VitbenchError, shorten
from vitbench.models.overrides import field_of, override_order, parse_value
from vitbench.models.specs import all_specs, get_spec
from vitbench.registry import Kind, entry
from vitbench.study.schema import MAX_COMBINATIONS, StudyModel
from vitbench.study.reader import Problems, dotted
from vitbench.tasks import tasks
from vitbench.tasks.fields import SHARED, LocalPath, path_fields, shared_default



def field_adapters() -> dict[str, list[TypeAdapter]]:
    """Every field a study may set -> the validators of the tasks that declare it (shared fields first)."""
    out: dict[str, dict[str, TypeAdapter]] = {f: {} for f in SHARED}
    for t in tasks().values():
        for name, info in t.Params.model_fields.items():
            typ = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            out.setdefault(name, {}).setdefault(repr(typ), TypeAdapter(typ))
    return {k: list(v.values()) for k, v in out.items() if v}


def shared_defaults() -> dict[str, Any]:
    """Defaults of the shared fields (before a task's own Params fill the rest)."""
    return {f: (d() if callable(d) else d) for f in SHARED if (d := shared_default(f)) is not ...}


SELECTORS = ("family", "tiny")  # family:<f> (its paper variants), tiny:<f|all> (tiny variants)


def models_for(value: str) -> list[str]:
    """A model name or selector -> canonical names. Selectors: family:<f> (paper variants), tiny:<f|all>; any
    other `prefix:name` is a model's name (an open-ended family's, e.g. timm:convnext_tiny)."""
    kind, fam = (s.strip() for s in value.partition(":")[::2])
    if ":" in value and kind in SELECTORS:
        if kind == "tiny":
            specs = [s for s in all_specs(None if fam == "all" else fam) if s.tiny]
        else:
            specs = all_specs(fam, include_tiny=False)
        return [s.name for s in specs]
    return [get_spec(value).name]


def _look_up(path: str) -> tuple[bool, str | None]:
    """(whether the local path or brace pattern `path` exists, the problem that keeps it from being looked up: a
    name too long, a pattern past its bound (vitbench.transfer.shards.MAX_SHARDS))."""
    try:
        return LocalPath.exists(path), None
    except ConfigError as e:
        return False, str(e)
    except OSError as e:
        return False, f"cannot be looked up ({e.strerror or e})"


class Expander:
    def __init__(self, m: StudyModel, problems: Problems):
        self.m, self.err = m, problems
        self.missing = Problems(problems.source, problems.root)  # paths that do not exist (reported apart)
        self.missing.spelled = problems.spelled  # (the same locations: a field set by --set is named so there too)
        self.tasks = tasks()
        self.adapters = field_adapters()
        # architecture fields, folded into the model (a task field of the same name would take precedence)
        self.arch = tuple(k for k in override_order() if k not in self.adapters)
        self.allowed = [*self.adapters, *self.arch]
        self.counted = 0  # combinations counted so far (MAX_COMBINATIONS)
        self.listed_allowed = False  # whether a message has listed the allowed fields (check_key)
        self.looked_up: dict[tuple, Any] = {}  # (what, name) -> its model spec, backend spec, path fields

    def once(self, what: str, name: str, find):
        """find(name), looked up once per name: a study of 10,000 trials names a few models, backends, tasks."""
        if (what, name) not in self.looked_up:
            self.looked_up[what, name] = find(name)
        return self.looked_up[what, name]

    # -- single values -------------------------------------------------------------------------------------
    def check_key(self, key: str, loc: tuple) -> bool:
        if key in self.adapters or key in self.arch:
            return True
        close = difflib.get_close_matches(key, self.allowed, n=3) if len(key) < 100 else []
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        allowed = "the fields listed above" if self.listed_allowed else ", ".join(self.allowed)
        self.listed_allowed = True  # the list once (1-2 kB): a study of many unknown fields shows them all
        self.err.add(loc, f"unknown field {shorten(key)}.{hint} Allowed: {allowed}")
        return False

    def value(self, key: str, v: Any, loc: tuple) -> list[Any] | None:
        """Validate one value of `key`; returns its normalised expansion (model selectors -> many) or None."""
        if isinstance(v, (list, dict)):
            self.err.add(loc, "expected a single value here, not a " + type(v).__name__, v)
            return None
        if key in self.arch:
            if v is None:  # the row's own value
                return [None]
            try:
                return [parse_value(key, v, "model")]
            except ConfigError as e:
                self.err.add(loc, str(e).removeprefix("model: "), v)
                return None
        problems = []
        for adapter in self.adapters[key]:
            try:
                v = adapter.validate_python(v)
                break
            except ValidationError as e:
                problems.append("; ".join(x["msg"].removeprefix("Value error, ") for x in e.errors()))
        else:
            self.err.add(loc, " or ".join(dict.fromkeys(problems)), v)
            return None
        if key == "model":
            try:
                return models_for(v)
            except VitbenchError as e:
                self.err.add(loc, str(e), v)
                return None
        if key == "task" and v not in self.tasks:
            self.err.add(loc, f"unknown task; allowed: {', '.join(self.tasks)}", v)
            return None
        if key == "backend":
            missing = entry(Kind.BACKEND, v).missing()
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
        """[(field values, their locations, origin)] for every combination, and how many there were."""
        m = self.m
        base: dict[str, tuple[Any, tuple | None]] = {k: (v, None) for k, v in shared_defaults().items()}
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
                if got:  # the valid values; none (all reported): the default, so the rest is still checked
                    axes[k] = got

        groups = self._zip_groups()
        excludes = self.excludes = self._excludes()
        combos: list[tuple[dict, dict, str]] = []
        if not m.axes and not m.zip and not m.include:
            self.err.add(("axes",), "the study has no axes, zip or include: nothing to run")
        if not self._within_limit(("axes",), axes, groups):
            return [], 0
        # the grid: the product of the axes and zip groups; with neither, a study is its include entries alone
        # (as a CI matrix of only include entries is), not those and the defaults as one more trial
        for values, locs in self._product(axes, groups) if m.axes or m.zip else ():
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
                    if got:
                        own[k] = got
            if any(k in inc and k not in own for k in ("model", "task")):
                continue  # what the entry is about was reported wrong; its other fields were checked one by one
            sub_axes = {k: v for k, v in axes.items() if k not in own}
            sub_groups = [(ks, rows) for ks, rows in groups if not set(ks) & set(own)]
            if not self._within_limit(loc, {**sub_axes, **own}, sub_groups):
                return [], 0
            for values, locs in self._product({**sub_axes, **own}, sub_groups):
                combos.append((values, locs, f"include[{i}]"))
        merged = []
        for values, locs, origin in combos:
            cfg = {k: v for k, (v, _) in base.items()}
            org = {k: loc for k, (_, loc) in base.items()}
            cfg.update(values)
            org.update(locs)
            merged.append((cfg, org, origin))
        return merged, len(merged)

    def _within_limit(self, loc: tuple, axes: dict, groups: list) -> bool:
        """Do the combinations so far plus this product of axes and zip groups stay within MAX_COMBINATIONS?
        Counted before anything is expanded."""
        n = math.prod(len(v) for v in axes.values()) * math.prod(len(rows) for _, rows in groups)
        self.counted += n
        if self.counted <= MAX_COMBINATIONS:
            return True
        self.err.add(loc, f"the study expands to at least {self.counted:,} combinations here; a study may have at "
                     f"most {MAX_COMBINATIONS:,}: split it into several studies")
        return False

    def _zip_groups(self) -> list[tuple[tuple[str, ...], list[tuple[tuple[Any, tuple], ...]]]]:
        groups = []
        zipped: dict[str, int] = {}  # field -> the first zip group that varies it
        for g, group in enumerate(self.m.zip):
            loc = ("zip", g)
            if not group:
                self.err.add(loc, "empty zip group")
                continue
            cols, ok = {}, True
            for k, vs in group.items():
                if not self.check_key(k, (*loc, k)):
                    ok = False
                    continue
                if k in self.m.axes:
                    self.err.add((*loc, k), f"{k!r} is both an axis and in a zip group; keep one")
                    ok = False
                    continue
                first = zipped.setdefault(k, g)
                if first != g:  # the product would keep the later group's value and drop the earlier one's
                    self.err.add((*loc, k), f"{k!r} is in zip[{first}] too: a field may vary in one zip group "
                                 "(put the lists that vary together in that group)")
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
                groups.append((tuple(cols), list(zip(*cols.values()))))
        return groups

    def _excludes(self) -> list[dict[str, set]]:
        excludes = []
        for i, ex in enumerate(self.m.exclude):
            spec = {}
            for k, vs in ex.items():
                if self.check_key(k, ("exclude", i, k)):
                    got = self.values(k, vs, ("exclude", i, k))
                    if got is not None:
                        spec[k] = {v for v, _ in got}
            if not ex:
                self.err.add(("exclude", i), "empty exclude entry (it would drop everything)")
            excludes.append(spec)
        return excludes

    def excluded(self, config: dict) -> bool:
        """Whether a grid trial's normalised config matches an exclude entry. The combination is matched as
        written first (expand); this matches the trial as it runs: a resolution left to the model's native one,
        an architecture field folded into the model's name or given in it (`exclude: [{model: R-Nano,
        resolution: 32}]` beside no resolution axis, or `[{depth: 3}]` beside `ViT-Nano/4[depth=3]`, dropped
        nothing and the trial ran)."""
        return any(ex and all(self._as_run(k, config) in allowed for k, allowed in ex.items())
                   for ex in getattr(self, "excludes", ()))

    def _as_run(self, key: str, config: dict) -> Any:
        """`key`'s value in a normalised trial config (an architecture field's from its model); ... if none."""
        if key not in self.arch:
            return config.get(key, ...)
        if config.get("model") is None:
            return ...
        spec = self.once("model", config["model"], get_spec)
        return getattr(spec.arch, field_of(key)) if key in spec.override_keys else ...

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

    def _fold(self, cfg: dict, arch: dict, org: dict, origin: str) -> bool:
        """Put the architecture fields `arch` into cfg["model"] (its canonical name); False, with the problem
        reported at the field it names (its allowed values in the message), when the model cannot take them."""
        arch = {k: v for k, v in arch.items() if v is not None}
        if not arch:
            return True
        try:
            cfg["model"] = get_spec(cfg["model"]).with_overrides(**arch).name
            return True
        except VitbenchError as e:
            msg = str(e)
            named = [k for k in arch if f"'{k}'" in msg or f"{k}=" in msg] or list(arch)
            where = org.get(named[-1]) or ("axes",)
            self.err.add(where, f"{e} (model {cfg['model']} from {dotted(org.get('model') or ())}, {origin})",
                         arch[named[-1]])
            return False

    def _implied(self, task, cfg: dict, org: dict) -> bool:
        """Fill the fields that the task's Params read from the trial's others when it leaves them unset (their
        `implied`, where they declare it: a vitbench checkpoint's model, from its header), each located where
        the field it came from was given; False, reported there, when they cannot be read."""
        implied = getattr(task.Params, "implied", None)
        try:
            found = implied(cfg) if implied is not None else {}
        except VitbenchError as e:
            f = _first_named(str(e), cfg)
            self.err.add(org.get(f) or ("axes",), f"for task {task.name!r}: {e}", cfg.get(f, ...))
            return False
        for f, (v, source) in found.items():
            cfg[f], org[f] = v, org.get(source)
        return True

    def normalise(self, cfg: dict, org: dict, origin: str) -> dict | None:
        """The trial config of one combination: its task's Params (fields the task does not use dropped, and those
        the study's defaults set that do not apply to it, `TaskParams.moot`; its defaults filled, native
        resolution/classes resolved), checked against what the backend can do."""
        if cfg.get("task") is None:
            if not self.err.about("task"):  # an invalid task value was reported already
                self.err.add(("axes",), "no task given: set axes.task (or defaults.task)")
            return None
        task = self.tasks[cfg["task"]]
        if not self._implied(task, cfg, org):
            return None
        if "model" in task.Params.model_fields and cfg.get("model") is None:
            if not self.err.about("model"):
                self.err.add(("axes",), "no model given: set axes.model (or defaults.model)")
            return None
        fields = task.Params.model_fields
        arch = {k: cfg.pop(k) for k in self.arch if k in cfg}
        if "model" in fields and not self._fold(cfg, arch, org, origin):
            return None
        if "resolution" in fields and "model" in fields:
            spec = self.once("model", cfg["model"], get_spec)
            res = cfg.get("resolution") or spec.resolution
            try:
                spec.check_resolution(res)
            except VitbenchError as e:
                where = org.get("resolution") or org.get("model") or ("axes",)
                self.err.add(where, f"{e} (model {spec.name} from {dotted(org.get('model') or ())}, {origin})",
                             res)
                return None
        for f in task.Params.moot(cfg):  # set for every trial by `defaults`, it does not apply to this one
            if f in cfg and (org.get(f) or ("defaults",))[0] == "defaults":
                del cfg[f]
        try:
            params = task.Params.model_validate({f: cfg[f] for f in fields if f in cfg})
        except ValidationError as e:
            for x in e.errors():
                msg = x["msg"].removeprefix("Value error, ")
                f = x["loc"][0] if x["loc"] else _first_named(msg, cfg)  # a check across fields: the one it names
                self.err.add(org.get(f) or ((f,) if f and x["loc"] else ("axes",)),
                             f"for task {task.name!r}: {msg}", cfg.get(f, ...) if f and x["loc"] else ...)
            return None
        config = params.config()
        for f in self.once("paths", task.name, lambda _: path_fields(task.Params)):
            if config.get(f) is None:
                continue
            found, problem = self.once("path", config[f], _look_up)
            if problem:
                self.err.add(org.get(f) or (f,), problem, config[f])
            elif not found:
                self.missing.add(org.get(f) or (f,), "no such file or directory on this machine", config[f])
        bspec = self.once("backend", config["backend"], backend_spec) if "backend" in config else None
        for f, problem in (bspec.problems(config, task.needs) if bspec else []):
            self.err.add(org.get(f) or org.get("backend") or ("axes",), f"{problem} (task {task.name!r})",
                         config.get(f, ...))
        return config


def _first_named(msg: str, cfg: dict) -> str | None:
    """The field of `cfg` a message of a check across fields names first (`target_qps 0.0001 schedules ...`),
    where the problem is reported: in the study file, or on the command line for a field `--set` gave."""
    import re

    at = {k: m.start() for k in cfg if (m := re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", msg))}
    return min(at, key=at.get) if at else None
