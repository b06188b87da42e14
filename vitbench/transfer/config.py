"""Turning user input (study parameters, CLI options) into validated transfer configs, or a ConfigError."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model, field_validator

from vitbench.errors import ConfigError, shorten
from vitbench.transfer.formats import (format_names, format_options, options_fields, readers_of, with_path,
                                      with_test_path)
from vitbench.transfer.limits import MAX_CLASSES, MAX_COUNT  # re-exported: declared in the leaf, for the readers
from vitbench.transfer.neutral import key_neutral  # re-exported: its users import it from here

M = TypeVar("M", bound=BaseModel)


class SeedField:
    """Marks a seed: a draw that repeats one measurement (init, split, batch order, LoadGen's schedule). The
    report's summaries pool rows that differ only in seeds (vitbench.tasks.seed_fields); compare does not."""


# A seed: numpy's legacy RandomState and a JAX PRNGKey take 32-bit unsigned seeds.
Seed = Annotated[int, Field(ge=0, le=2**32 - 1), SeedField()]
# A duration in seconds: a week is beyond any measurement here; inf or 1e300 would time for ever.
MAX_SECONDS = 7 * 86400
# The image sources vitbench reads: vitbench.transfer.formats, one row per format (its reader, the fields it
# reads)
DatasetName = Literal[format_names()]
PATH_DATASETS = with_path()  # read from a local path
TEST_PATH_DATASETS = with_test_path()  # may take a separate test path (test_path)
# path field -> (the datasets that take it, why the others do not)
_PATH_RULES = {"path": (PATH_DATASETS, "it ships with the code"),
               "test_path": (TEST_PATH_DATASETS, "its test split is read from path")}


def option_name(field: str, options: Mapping[str, str]) -> str:
    """How the user named config field `field` (dotted: `teacher.lam`): `options[field]`; a key ending in '.'
    rewrites that prefix first (`{"teacher.upstream.": ""}`: the teacher's recipe is the student's options);
    else the field itself."""
    if field in options:
        return options[field]
    parent, _, last = field.rpartition(".")
    if parent and last.isdigit():  # an item of a list field: lr_grid.1 -> --lr-grid value 2
        return f"{option_name(parent, options)} value {int(last) + 1}"
    for prefix, instead in options.items():
        if prefix.endswith(".") and field.startswith(prefix):
            return option_name(instead + field[len(prefix):], options)
    return field


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def field_range(cls: type[BaseModel], loc: tuple) -> str | None:
    """The declared range of the field at `loc` in `cls` ('>= 0.05, <= 100'), walking nested models; None when
    it declares none. Read from the field's own declaration, so a message states the range it enforces."""
    model: Any = cls
    info = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(part, str) or fields is None or part not in fields:
            return None
        info = fields[part]
        model = next((a for a in (info.annotation, *getattr(info.annotation, "__args__", ()))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if info is None:
        return None
    bounds = [f"{sym} {getattr(m, attr)}" for m in info.metadata for attr, sym in _BOUNDS
              if getattr(m, attr, None) is not None]
    return ", ".join(dict.fromkeys(bounds)) or None  # a field declared like another's holds its bounds twice


def validated(cls: type[M], data: dict, where: str, options: Mapping[str, str] | None = None,
              context: Mapping | None = None) -> M:
    """`cls.model_validate(data)`; a ValidationError becomes a ConfigError naming each field and value, as the
    user named it (`options`: field -> option, see `option_name`; a problem named twice is said once).
    `context`: pydantic's validation context (e.g. a model already resolved: PretrainConfig's `spec`)."""
    try:
        out = cls.model_validate(data, context=context)
    except ValidationError as e:
        # a union field fails once per alternative, tagged in its loc (`constrained-float`, `literal['auto']`):
        # one line per field, its alternatives joined by "or"
        fields: dict[str, tuple[list[str], object]] = {}
        for x in e.errors():
            name = ".".join(str(p) for p in x["loc"] if isinstance(p, int) or str(p).isidentifier()) or "(config)"
            name = option_name(name, options or {})
            msg = x["msg"].removeprefix("Value error, ")
            allowed = field_range(cls, x["loc"]) if x["type"] == "finite_number" else None
            fields.setdefault(name, ([], x.get("input")))[0].append(f"{msg}, {allowed}" if allowed else msg)
        probs = "; ".join(f"{name}: {' or '.join(dict.fromkeys(msgs))}"
                          + ("" if name == "(config)" else f" (got {shorten(got)})")  # not the whole config
                          for name, (msgs, got) in fields.items())
        raise ConfigError(f"{where}: invalid settings: {probs}") from None
    if options:  # the data sources' messages (at run time) name the data settings as the user did, too
        _name_data(out, "", options)
    return out


def _name_data(model: BaseModel, prefix: str, options: Mapping[str, str]) -> None:
    """Name every DataConfig in `model` (at config path `prefix`, `model` itself fresh from validation) by
    `options` (DataConfig.named). A nested model is named in a copy put in its place: a field's default is one
    object every config shares (a module's DataConfig constant), which must not keep one command's names."""
    if isinstance(model, _Data):
        model.named(lambda f: option_name(prefix + f, options))
        return
    for field in type(model).model_fields:
        value = getattr(model, field)
        if isinstance(value, BaseModel):
            value = value.model_copy()
            object.__setattr__(model, field, value)
            _name_data(value, f"{prefix}{field}.", options)


def parse_floats(text: str, what: str, example: str) -> list[float]:
    try:
        out = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        out = []
    if not out:
        raise ConfigError(f"{what} {text!r} must be comma-separated numbers, e.g. {example!r}")
    return out


def parse_ints(text: str, what: str, example: str) -> list[int]:
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        out = []
    if not out:
        raise ConfigError(f"{what} {text!r} must be comma-separated integers, e.g. {example!r}")
    return out


def joined(values) -> str:
    """[1, 5, 10, 25] -> "1,5,10,25": a list as a comma-separated option or study field writes it (read back by
    parse_ints / parse_floats)."""
    return ",".join(str(v) for v in values)


def ints_text(values: list[int]) -> str:
    """[5, 6, 7, 8, 9] -> "5-9" (a run of three or more), [1, 5, 10] -> "1,5,10": a class list as DataConfig's
    `classes` reads it from text."""
    values = list(values)
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return joined(values)


def description_of(model: type[BaseModel], field: str) -> str | None:
    """The description `model` declares for `field`: the help of an option that sets a twin of it (a task's
    study field), declared once."""
    return model.model_fields[field].description


def default_of(model: type[BaseModel], field: str) -> Any:
    """The default `model` declares for `field` (a factory's: None): for a second model whose field means the
    same (a task's parameter, a command's option), so the default is declared once."""
    return model.model_fields[field].get_default(call_default_factory=False)


def field_like(model: type[BaseModel], field: str, **kwargs: Any) -> Any:
    """A Field that means `model`'s `field` (a task's study field that sets a config's): its default and its
    bounds, declared there once, with `kwargs` (its description). A study then refuses what the config would
    refuse, before anything runs (`pretrain_steps: 0` passed a dry run and failed in the trial)."""
    from pydantic.fields import FieldInfo

    return FieldInfo.merge_field_infos(model.model_fields[field], **kwargs)


class _Data(BaseModel):
    """DataConfig's fields every format reads (DataConfig adds each format's own options)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # a field's description is the help of every option that sets it (vitbench.cli.path_options, cli/data_options)
    name: DatasetName = Field("digits", description=f"{' | '.join(format_names())} (docs/datasets.md).")
    path: str | None = Field(None, description="Local path: a class folder, a shard pattern "
                             "(train-{000..099}.tar) or directory, an hf dataset directory, a cifar directory, "
                             "an .npz.")
    test_path: str | None = Field(None, description="webdataset / hf: the test split's own path or pattern "
                                  "(default: test-*.tar or the test split beside the path).")
    # (the formats' own options are each format's declaration, vitbench.transfer.formats: added below)
    skip_corrupt: bool = Field(False, description="Skip files that do not decode, counted in the row "
                               "(skipped_files) and on the terminal; default: stop (exit 2) naming the file.")
    # added after trial and upstream cache keys existed, so left out of the dump at its default (those keys stay
    # as they were): verify every image before any work (vitbench.transfer.check), opt-in
    check_data: bool = key_neutral(False, description="Verify every image of the dataset before any work (a PNG's "
                                   "CRCs and data size, a JPEG at 1/8 scale): a corrupt file exits 2 at once, not "
                                   "partway (or, skipping corrupt files, is counted from the start). Reads the "
                                   "whole dataset.")
    workers: int = Field(0, ge=0, le=256, description="Processes decoding and preprocessing ahead (0: in this "
                         "process). Results do not depend on it.")
    # subset of source labels, relabelled 0..K-1 in this order
    classes: list[int] | None = Field(None, description="Classes: 'a-b' or 'a,b,c'; '' for all.")
    seed: Seed = Field(0, description="Split seed.")
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="Share of train held out to choose the "
                                "fine-tuning LR (few-shot: the L2 regulariser).")
    test_fraction: float = Field(0.25, gt=0.0, lt=1.0)  # used only when the source has no test split
    train_per_class: int | None = Field(None, ge=1, le=MAX_COUNT)  # cap train images per class (data-size scaling)
    # how a message names a field of this config: set by the task that built it (`named`), else `data.<field>`
    _names: Any = PrivateAttr(None)

    def name_of(self, field: str) -> str:
        """How a data source's message names this config's `field`: as the user named it (the task's option or
        study field, `named`), else its config path `data.<field>`."""
        return self._names(field) if self._names else f"data.{field}"

    def __eq__(self, other: object) -> bool:  # the fields only: how messages name them is not the config
        return type(other) is type(self) and self.__dict__ == other.__dict__

    __hash__ = BaseModel.__hash__

    def __getstate__(self):  # a copy in another process (pickled) names its fields by their config paths
        state = super().__getstate__()
        private = state.get("__pydantic_private__") or {}
        if private.get("_names") is not None:
            state = {**state, "__pydantic_private__": {**private, "_names": None}}
        return state

    def named(self, names) -> _Data:
        """This config, its fields named in messages by `names(field)` (a copy keeps it: pydantic copies private
        attributes). Not part of the config, the key or equality."""
        self._names = names
        return self

    @field_validator("path", "test_path")
    @classmethod
    def _path_fits_dataset(cls, v, info):
        """A path only for datasets read from one, a test_path only for those with a separate test split (never
        silently ignored)."""
        name = info.data.get("name")
        allowed, why = _PATH_RULES[info.field_name]
        if name is not None and name not in allowed and v is not None:
            raise ValueError(f"dataset {name!r} takes no {info.field_name} ({why}); a {info.field_name} is for "
                             f"{', '.join(allowed)}")
        return v

    @field_validator(*format_options(), check_fields=False)
    @classmethod
    def _option_fits_dataset(cls, v, info):
        """A format's own option (vitbench.transfer.formats: `Format.options`) set for a format that does not
        read it is refused, naming the formats that do (never silently ignored)."""
        name, readers = info.data.get("name"), readers_of(info.field_name)
        if name is not None and name not in readers and v != cls.model_fields[info.field_name].default:
            raise ValueError(f"dataset {name!r} takes no {info.field_name}; {info.field_name} is for "
                             f"{', '.join(readers)}")
        return v

    @field_validator("classes", mode="before")
    @classmethod
    def _parse_classes(cls, v):
        """Accept a list, 'a-b' (inclusive range), or 'a,b,c'; a range is bounded (MAX_CLASSES) before it is
        expanded."""
        if isinstance(v, str):
            try:
                if "-" in v:
                    a, b = (int(t) for t in v.split("-"))
                    if not 0 <= a <= b < MAX_CLASSES:
                        raise ValueError(f"classes {shorten(v)}: a range a-b needs 0 <= a <= b <= "
                                         f"{MAX_CLASSES - 1} (class indices of one dataset)")
                    return list(range(a, b + 1))
                return [int(t) for t in v.split(",") if t.strip()]
            except ValueError as e:
                if str(e).startswith("classes "):
                    raise
                raise ValueError(f"classes {shorten(v)}: expected a list of ints, 'a-b' or 'a,b,c'") from None
        return v

    @field_validator("classes")
    @classmethod
    def _unique(cls, v):
        if v is None:
            return v
        if len(v) > MAX_CLASSES or any(not 0 <= c < MAX_CLASSES for c in v):
            raise ValueError(f"classes {shorten(v)}: class indices are 0..{MAX_CLASSES - 1}, at most "
                             f"{MAX_CLASSES} of them")
        if len(set(v)) != len(v) or len(v) < 2:
            raise ValueError(f"classes {shorten(v)}: need at least 2 distinct labels")
        return v


# Which images, which classes, how to split. JSON-able; part of a trial's key. The fields every format reads and
# each format's own options, declared with its format (vitbench.transfer.formats: `Format.own`) and dumped flat
# beside them, as they were when they were declared here (keys are hashes of sorted dumps: unchanged)
DataConfig = create_model("DataConfig", __base__=_Data, __module__=__name__, __doc__=(
    "Which images, which classes, how to split. JSON-able; part of a trial's key."), **options_fields())
