"""Turning user input (study parameters, CLI options) into validated transfer configs, or a ConfigError."""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ValidationError

from vitbench.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
# The image sources vitbench reads (vitbench.transfer.data: the loaders, one per name).
DatasetName = Literal["digits", "synthetic", "folder", "cifar10", "cifar100", "npz"]


def validated(cls: type[M], data: dict, where: str) -> M:
    """`cls.model_validate(data)`; a ValidationError becomes a ConfigError naming each field and value."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        # a union field fails once per alternative, tagged in its loc (`constrained-float`, `literal['auto']`):
        # one line per field, its alternatives joined by "or"
        fields: dict[str, tuple[list[str], object]] = {}
        for x in e.errors():
            name = ".".join(str(p) for p in x["loc"] if isinstance(p, int) or str(p).isidentifier()) or "(config)"
            fields.setdefault(name, ([], x.get("input")))[0].append(x["msg"])
        probs = "; ".join(f"{name}: {' or '.join(dict.fromkeys(msgs))} (got {got!r})"
                          for name, (msgs, got) in fields.items())
        raise ConfigError(f"{where}: invalid settings: {probs}") from None


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
