"""The trial fields tasks share, declared once: type, default and meaning.

A task's parameter model (its `Params`) is built from the names of the shared fields it uses plus its own
pydantic class of task-specific parameters (`params_model`): that model is THE declaration of the task's fields
and defaults; studies, the trial key, commands and the docs all derive from it. A trial keeps only its task's
fields, so an axis a task ignores (flops and batch_size) never multiplies its trials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, Strict, ValidationInfo,
                      create_model, field_validator, model_validator)
from pydantic.fields import FieldInfo

from vitbench.backends.base import OPTIMIZERS, PRECISIONS, BackendName, default_backend
from vitbench.backends.kinds import DEFAULT_DEVICES, DEFAULT_PARALLELISM
from vitbench.backends.parallel import known_parallelism
from vitbench.errors import VitbenchError
from vitbench.transfer.config import MAX_COUNT, DataConfig, Seed, SeedField, key_neutral

if TYPE_CHECKING:
    from vitbench.models.specs import ModelSpec


class LocalPath:
    """Marks a field whose value is a file or directory on local disk: a study checks that it exists before
    anything runs (vitbench.study.missing_paths), naming the field; a dry run still lists the trials."""

    def __repr__(self) -> str:
        return "LocalPath()"

    @staticmethod
    def exists(value: str) -> bool:
        """Whether `value` names local files: a path, or a brace pattern (shards: `train-{000..009}.tar`)
        whose every expansion exists."""
        from pathlib import Path

        from vitbench.transfer.shards import expand_braces

        return all(Path(p).expanduser().exists() for p in expand_braces(str(value)))


PathField = Annotated[str, LocalPath()]


class InputFile:
    """Marks a field naming a file a trial reads whole (a checkpoint): the SHA-256 of its content goes with the
    trial's row (`Record.runner[INPUT_SHA256]`, vitbench.trial), and a resumed sweep runs the trial again where
    the file's content has changed since (vitbench.runner.plan): its key holds the path, not the content."""

    def __repr__(self) -> str:
        return "InputFile()"


# the row's runner entry: {field: SHA-256 of the file it named, as the trial read it}
INPUT_SHA256 = "input_sha256"


def _checkpoint_file(value: str) -> str:
    """A checkpoint's name as the loaders read it (vitbench.models.checkpoints: safetensors or .npz; pickles
    never), refused where a study or a command is parsed, not when its trial runs."""
    from pathlib import Path

    from vitbench.models.checkpoints import PICKLE_SUFFIXES, SUFFIXES

    suffix = Path(value).suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        raise ValueError(f"{suffix} checkpoints are pickles, which can run code: never loaded; give a "
                         f"{' or '.join(SUFFIXES)} file")
    if suffix not in SUFFIXES:
        raise ValueError(f"a checkpoint is a {' or '.join(SUFFIXES)} file, not {suffix or 'a name without one'}")
    return value


CheckpointField = Annotated[str, LocalPath(), InputFile(), AfterValidator(_checkpoint_file)]

# The validation context's key under which a caller says how its user names each field (a callable field ->
# name; a command: its options, `--data` for real_input_dataset); a check across fields names them through
# `named`. Without it (a study) a field is named as the study writes it.
FIELD_NAMES = "field_names"


def named(info, field: str) -> str:
    """How a message names `field`: as the validation context's FIELD_NAMES says, else the field itself."""
    names = ((info.context if info is not None else None) or {}).get(FIELD_NAMES)
    return names(field) if names else field


def data_twins(paths: dict[str, str], defaults: dict | None = None) -> dict:
    """Study fields for DataConfig fields (`paths`: study field -> DataConfig field), as pydantic field
    definitions: typed and bounded as DataConfig declares them, local paths marked (checked when a study is
    parsed), left out of the key at DataConfig's default (`defaults`: another one, None making the field
    optional), so trials keyed before a field existed keep their keys; described as DataConfig describes them."""
    fields = {}
    for field, path in paths.items():
        info = DataConfig.model_fields[path]
        typ = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        default = (defaults or {}).get(field, info.get_default(call_default_factory=False))
        if path in ("path", "test_path"):
            typ = PathField | None
        elif default is None:
            typ = typ | None
        fields[field] = (typ, key_neutral(default, description=info.description))  # its help: DataConfig's
    return fields


def applies_when(**allowed: tuple) -> dict:
    """A field's `json_schema_extra` that makes it apply only where each named field holds one of its allowed
    values (`applies_when(scenario=("Server",))`); elsewhere it is left out of the trial config and may hold only
    its default (TaskParams.moot)."""
    return {"applies_when": {k: tuple(v) for k, v in allowed.items()}}


def conditions(info: FieldInfo) -> dict[str, tuple]:
    """The field's `applies_when` conditions (empty: it always applies)."""
    extra = info.json_schema_extra
    return extra.get("applies_when", {}) if isinstance(extra, dict) else {}


def _marked(params: type[BaseModel], marker: type) -> tuple[str, ...]:
    return tuple(n for n, f in params.model_fields.items() if any(isinstance(m, marker) for m in f.metadata)
                 or any(isinstance(m, marker) for a in getattr(f.annotation, "__args__", ())
                        for m in getattr(a, "__metadata__", ())))


def path_fields(params: type[BaseModel]) -> tuple[str, ...]:
    """The fields of a Params model that name local paths."""
    return _marked(params, LocalPath)


def input_files(params: type[BaseModel], config: dict) -> dict[str, str]:
    """{field: path} of the files a trial of `config` reads whole (InputFile fields that are set); none where
    `params` is no pydantic model (a test's stand-in task)."""
    if not hasattr(params, "model_fields"):
        return {}
    return {f: str(config[f]) for f in _marked(params, InputFile) if config.get(f)}


def seed_fields(params: type[BaseModel]) -> tuple[str, ...]:
    """The fields of a Params model that are seeds (vitbench.transfer.config.Seed)."""
    return _marked(params, SeedField)


# Trial-config fields that never define a measurement: runner bookkeeping, or machine-dependent defaults
# (max_batch's CPU memory budget is half of the RAM available at the time). compare matches trials without them
# (vitbench.compare.match), the report's summaries pool over them (vitbench.report.tables).
BOOKKEEPING = ("repeat", "repeats", "timeout", "timeout_s", "study", "memory_limit_mib")


_PosInt = Annotated[int, Strict(), Field(gt=0, le=MAX_COUNT)]
_StrictStr = Annotated[str, Strict()]
_StrictBool = Annotated[bool, Strict()]


def literal_of(values: tuple[str, ...]) -> Any:
    """Literal[values]: a field that takes one of these strings (declared once where the values are)."""
    from typing import Literal

    return Literal[values]  # type: ignore[valid-type]


# name: (type, default, description). A default of ... means required; a callable default is a factory; a
# key_neutral(default) (vitbench.transfer.config) is a field added after trials were keyed: left out of the trial
# config at its default, so every trial that existed before it keeps its key (and its rows' config).
SHARED: dict[str, tuple[Any, Any, str]] = {
    "model": (_StrictStr, ..., "model variant: a name, alias or selector (family:<f>, tiny:<f|all>)"),
    "backend": (BackendName, default_backend, "framework the trial runs on (see `vitbench plugins`)"),
    "task": (_StrictStr, ..., "what is measured (see `vitbench plugins`)"),
    "device": (_StrictStr, "cpu", "cpu, cuda, cuda:N (torch); cpu, gpu, tpu (jax)"),
    "resolution": (_PosInt | None, None, "input size in pixels (null: the variant's native one)"),
    "batch_size": (_PosInt, 8, "images per step (requested; records keep the achieved batch apart)"),
    "precision": (literal_of(PRECISIONS), "fp32", "compute precision: fp32 = full IEEE fp32 matmuls on every "
                  "backend, tf32 = TF32 tensor cores (GPU), bf16/fp16 = autocast or mixed, int8 = dynamic "
                  "quantization (inference runtimes)"),
    "compile": (_StrictBool, False, "compile the eager model (torch.compile)"),
    "compile_mode": (_StrictStr | None, None, "mode of the optional compiler (null: its default; the backend "
                     "lists its modes), e.g. max-autotune, reduce-overhead"),
    "seed": (Annotated[Seed, Strict()], 0, "model init and data seed"),
    "threads": (_PosInt | None, None, "intra-op CPU threads (null: chosen per trial: a backend whose pool stalls "
                "under other load takes the cores others leave free, the others their default); the row's env "
                "records the count used (threads) and how it was chosen (threads_chosen)"),
    "num_classes": (_PosInt | None, None, "classifier outputs (null: the variant's default)"),
    "optimizer": (literal_of(OPTIMIZERS), "adam", "training optimiser: adam (pre-training) or sgd (momentum 0.9)"),
    "devices": (Annotated[int, Strict(), Field(gt=0, le=MAX_COUNT)], key_neutral(DEFAULT_DEVICES),
                "local devices one step runs on (batch_size is the global batch, split evenly over them); the "
                "trial launches one process per device where its backend needs that (docs/devices.md)"),
    "parallelism": (Annotated[str, Strict(), AfterValidator(known_parallelism)],
                    key_neutral(DEFAULT_PARALLELISM.value),
                    "with devices > 1: dp (parameters replicated, gradients all-reduced), fsdp (parameters, "
                    "gradients and optimizer state sharded) or a registered mode (vitbench.backends.parallel); "
                    "the backend lists what it runs"),
    "channels_last": (_StrictBool | None, None, "NHWC memory format (null: on for conv families, off for ViT)"),
}


class TaskParams(BaseModel):
    """Base of every task's parameter model: unknown keys are errors; the model variant's native resolution
    and class count fill `resolution` / `num_classes` when a task uses them and they are not given.

    The model name is parsed once per validation (`_resolve`): the checks of the other fields read that ModelSpec
    (in `info.data["model"]` while fields are validated), `_native` runs before the task's own model validators
    (params_model puts this class last among the bases) and stores it as `spec` with the field as the canonical
    name, so those validators read `self.spec`; the task hands it on (vitbench.backends.base.Step.spec), so a
    trial parses its model once."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # inf seconds: a loop forever
    _spec: ModelSpec | None = PrivateAttr(None)
    _names: Any = PrivateAttr(None)  # the validation context's FIELD_NAMES: how this value's user names a field
    _filled: frozenset = PrivateAttr(frozenset())  # fields `_native` filled because they were not given

    @property
    def spec(self) -> ModelSpec | None:
        """The trial's model, resolved when these params were validated (None for a task without a model)."""
        return self._spec

    # nested config path -> the field that sets it, declared by each part these params are made of (a class
    # variable of its own: `upstream.lr` -> `pretrain_lr`, vitbench.tasks.upstream); read through field_paths
    PATHS: ClassVar[dict[str, str]] = {}

    @classmethod
    def field_paths(cls) -> dict[str, str]:
        """Every nested config path these params' fields set -> the field (`upstream.lr` -> `pretrain_lr`): what a
        study or `--set` may write in place of the field's name, read as it (the trial's config and key keep the
        field's name). Gathered from the PATHS of every base class, none written here."""
        out: dict[str, str] = {}
        for c in reversed(cls.__mro__):
            out.update(vars(c).get("PATHS", {}))
        return out

    def name_of(self, field: str) -> str:
        """How a message about these params names `field` when the task runs: as the caller that validated them
        named it (a command: its option; FIELD_NAMES), else the field itself (a study's trial). Not part of the
        config, the key or equality of values."""
        return self._names(field) if self._names else field

    @field_validator("model", check_fields=False)
    @classmethod
    def _resolve(cls, v):
        """The ModelSpec `v` names, held in the field until `_native` stores it as `spec` and the field as the
        canonical name; a name that does not parse stays as given (reported by `_native`, as before)."""
        from vitbench.models.specs import get_spec

        try:
            return get_spec(v)
        except VitbenchError:
            return v

    @staticmethod
    def _resolved(info) -> ModelSpec | None:
        """The spec `_resolve` left in the `model` field; None when there is no model or it did not parse."""
        from vitbench.models.specs import ModelSpec

        model = info.data.get("model")
        return model if isinstance(model, ModelSpec) else None

    @field_validator("resolution", check_fields=False)
    @classmethod
    def _resolution_fits(cls, v, info):
        """A given resolution must be a multiple of the model's total stride (an error on the field itself, so
        a message names it as the user did: `resolution:` in a study, --resolution on the command line)."""
        spec = cls._resolved(info)
        if v is None or spec is None:  # no model, or the model's own problem: reported on `model` by _native
            return v
        try:
            spec.check_resolution(v)
        except VitbenchError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("backend", check_fields=False)
    @classmethod
    def _backend_builds(cls, v, info):
        """A model whose family only some backends build (vitbench.models.families: `backends`) is refused on
        another, naming those that build it (an error on `backend`, as the user named it)."""
        spec = cls._resolved(info)
        if v is None or spec is None:  # no model, or the model's own problem: reported on `model` by _native
            return v
        from vitbench.models.families import backend_problem

        problem = backend_problem(spec, v)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _native(self, info: ValidationInfo):
        self._names = ((info.context if info is not None else None) or {}).get(FIELD_NAMES)
        fields = type(self).model_fields
        if "model" not in fields:
            return self
        from vitbench.models.specs import ModelSpec, get_spec

        spec = self.model
        if not isinstance(spec, ModelSpec):  # it did not parse in _resolve: parsed again for its error
            try:
                spec = get_spec(self.model)
            except VitbenchError as e:
                raise ValueError(str(e)) from None
        updates = {"model": spec.name}
        if "resolution" in fields:  # a given one was checked against the model by _resolution_fits (named)
            updates["resolution"] = spec.resolution if self.resolution is None else self.resolution
        if "num_classes" in fields and self.num_classes is None:
            updates["num_classes"] = spec.num_classes
        self._filled = frozenset(k for k in ("resolution", "num_classes")
                                 if k in fields and getattr(self, k) is None)  # a checkpoint's own may replace it
        for k, v in updates.items():
            object.__setattr__(self, k, v)
        self._spec = spec
        return self

    @classmethod
    def moot(cls, values: Mapping[str, Any]) -> dict[str, dict[str, tuple]]:
        """The fields that do not apply given the others' `values` (their `applies_when`, declared on the field:
        `target_qps` applies to the Server and Offline scenarios only) -> that condition; a field not in
        `values` is read at its default."""
        out = {}
        for name, f in cls.model_fields.items():
            when = conditions(f)
            if any(values.get(k, cls.model_fields[k].default) not in allowed for k, allowed in when.items()):
                out[name] = when
        return out

    @model_validator(mode="after")
    def _applies(self):
        """A field that does not apply to these params (`applies_when`) may only hold its default: a value given
        for another scenario is refused, not silently ignored. A study drops such a field where its `defaults`
        set it for every scenario (vitbench.study.expand)."""
        fields = type(self).model_fields
        given = {n: w for n, w in self.moot(self.__dict__).items() if getattr(self, n) != fields[n].default}
        if given:
            def where(w: dict) -> str:
                return " and ".join(f"{self.name_of(k)} {' or '.join(map(str, v))}" for k, v in w.items())

            here = dict.fromkeys(k for w in given.values() for k in w)
            raise ValueError("; ".join(f"{self.name_of(n)} applies only with {where(w)}" for n, w in given.items())
                             + f" (here {', '.join(f'{self.name_of(k)} {getattr(self, k)}' for k in here)}): "
                             f"leave {'it' if len(given) == 1 else 'them'} unset")
        return self

    @model_validator(mode="after")
    def _spread(self, info: ValidationInfo):
        """A parallelism mode spreads one step over devices > 1; on one device the step runs unspread while the
        row would say it ran under the mode: refused (a study's trial and a command alike). The default mode
        (dp) on one device is what runs, so it stays accepted."""
        fields = type(self).model_fields
        if "parallelism" not in fields or "devices" not in fields:
            return self
        if self.parallelism == DEFAULT_PARALLELISM.value or self.devices > 1:
            return self
        mode, devices = named(info, "parallelism"), named(info, "devices")
        raise ValueError(f"{mode} {self.parallelism} applies with {devices} N > 1 (how one step is spread over N "
                         f"devices); on {self.devices} device it would change nothing: set {devices} N, or leave "
                         f"{mode} unset")

    def config(self) -> dict:
        """The normalised trial config: JSON-able, the input of the trial key (key_neutral fields left out at
        their default, fields that do not apply to it left out: `moot`)."""
        config = self.model_dump(mode="json")
        for name in self.moot(config):
            config.pop(name, None)
        return config


def shared_default(name: str) -> Any:
    """The default SHARED declares for `name` (a key_neutral field's too; a factory is returned, not called)."""
    default = SHARED[name][1]
    return default.get_default() if isinstance(default, FieldInfo) else default


def params_model(name: str, shared: tuple[str, ...], *own: type[BaseModel],
                 neutral: tuple[str, ...] = (), applies: Mapping[str, dict] | None = None) -> type[TaskParams]:
    """A task's Params: the shared fields named in `shared` (from SHARED) plus the fields of the `own` classes;
    `neutral`: shared fields the task took up after its trials were keyed, left out of its trial config at their
    default (key_neutral), so those keys stay as they were; `applies`: shared field -> `applies_when(...)`, where
    it applies in this task only (serve's batch_size: not in SingleStream), as a task's own field declares it."""
    applies = dict(applies or {})
    unknown = [f for f in (*shared, *neutral) if f not in SHARED]
    if unknown:
        raise ValueError(f"{name}: unknown shared fields {unknown}; shared fields: {', '.join(SHARED)}")
    if any(f not in (*shared, *neutral) or "applies_when" not in w for f, w in applies.items()):
        raise ValueError(f"{name}: applies takes shared fields of this task -> applies_when(...), got {applies}")
    if "task" not in shared:
        raise ValueError(f"{name}: every task's params include 'task'")
    definitions: dict[str, Any] = {}
    for f in neutral:
        typ, default, description = SHARED[f]
        if callable(default) or isinstance(default, FieldInfo) or default is ...:
            raise ValueError(f"{name}: shared field {f!r} has no plain default to be key-neutral at")
        extra = {"json_schema_extra": applies[f]} if f in applies else {}
        definitions[f] = (typ, key_neutral(default, description=description, **extra))
    for f in shared:
        typ, default, description = SHARED[f]
        extra = {"json_schema_extra": applies[f]} if f in applies else {}
        if isinstance(default, FieldInfo):  # key_neutral(...): its default and its dump rule, with the description
            definitions[f] = (typ, FieldInfo.merge_field_infos(default, description=description, **extra))
        elif callable(default) and default is not ...:
            definitions[f] = (typ, Field(default_factory=default, description=description, **extra))
        else:
            definitions[f] = (typ, Field(default, description=description, **extra))
    bases = (*own, TaskParams)  # TaskParams last: its `_native` runs before the own classes' model validators
    clash = [f for cls in own for f in cls.model_fields if f in SHARED]
    if clash:
        raise ValueError(f"{name}: own parameters {clash} clash with shared fields")
    return create_model(name, __base__=bases, **definitions)
