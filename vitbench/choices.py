"""Closed sets of values named by strings (an objective, a timer kind, a GELU form): one base enum and one way to
read user text into one, with one message for a value that is not in the set."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TypeVar

from vitbench.errors import ConfigError, shorten

C = TypeVar("C", bound="Choice")


def not_allowed(option: str, value, allowed: Iterable[str]) -> str:
    """The message for `value` given to `option` (as the user named it) outside `allowed`."""
    return f"{option} {shorten(value)} is not allowed; allowed: {', '.join(allowed)}"


class Choice(str, enum.Enum):
    """A string enum whose str() and format() are its value (what a row, a file and a message hold, on every
    Python version) and which `parse`s user text."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls: type[C], value, option: str) -> C:
        """The member whose value is `value`, else a ConfigError naming `option` and the allowed values."""
        try:
            return cls(value)
        except (TypeError, ValueError):
            raise ConfigError(not_allowed(option, value, cls.values())) from None
