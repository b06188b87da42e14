"""Errors the CLI turns into a clear message and exit code 2 (never a traceback)."""

from __future__ import annotations

# The exit status of a command ended by Ctrl-C: 128 + SIGINT (2), the shell's convention (bash(1), EXIT STATUS:
# "128+n" for a command that ends on fatal signal n)
INTERRUPTED_EXIT = 130


class VitbenchError(Exception):
    """Base class: a user-facing problem with a message that names the way out."""

    exit_code = 2


class UnknownModelError(VitbenchError):
    """A model name that matches no variant; the message lists close matches."""


class ConfigError(VitbenchError):
    """Bad input: a study file, CLI option or data path. Names file, field and allowed values."""


class PluginError(ConfigError):
    """A plug-in module ($VITBENCH_PLUGINS or an entry point) that cannot be imported: names it and why."""


class BackendUnavailable(VitbenchError):
    """The requested backend (or device) is not installed or not present here."""


class TrainingDiverged(VitbenchError):
    """A training run whose loss or weights stopped being finite: no checkpoint and no 'ok' row come of it (a
    sweep's row has status 'diverged'); a failed measurement, so exit code 1. `step`: the first bad step (1-based;
    None when only the weights show it)."""

    exit_code = 1

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step


class NonFiniteResult(VitbenchError):
    """A number a command computed (features, logits, a metric) is NaN or infinite: it never becomes a result;
    a failed measurement, so exit code 1."""

    exit_code = 1


class VitbenchWarning(UserWarning):
    """Something the user should know that did not stop the command (a skipped corrupt line): the CLI prints it
    once, as `warning: <message>`, without Python's source-path format."""


class UnsafeFileError(VitbenchError):
    """A file that would need unpickling or code execution to load; refused."""


def looks_like_oom(exc: BaseException) -> bool:
    """Out-of-memory by any framework: MemoryError, torch.cuda.OutOfMemoryError, XLA RESOURCE_EXHAUSTED,
    the CPU allocator's "can't allocate memory", cuBLAS's and cuDNN's workspace allocations
    (CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED: out of device memory inside the library). One check shared
    by the backends and the trial runner."""
    if isinstance(exc, MemoryError) or "OutOfMemory" in type(exc).__name__:
        return True
    msg = str(exc).lower()
    return any(s in msg for s in ("out of memory", "resource_exhausted", "resource exhausted",
                                  "can't allocate memory", "status_alloc_failed"))


def shorten(value, limit: int = 80) -> str:
    """`repr(value)` cut to about `limit` characters, saying how long it was: how an error message quotes user
    input, so that the message stays short whatever the input (a 2 MB model name, a list of 10,000 items)."""
    return clip(repr(value), limit)


def clip(text: str, limit: int = 400) -> str:
    """`text` cut to about `limit` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


LONG_WORD = 300  # characters of one unbroken word a message keeps (a path of 20 deep folders; not a pasted blob)


def clip_words(text: str, limit: int = LONG_WORD) -> str:
    """`text` with each unbroken run of more than `limit` characters cut as `clip` cuts: a message quoting a
    100 KB value the user typed (an unknown backend, a --set key) stays short, whichever check raised it."""
    import re

    return re.sub(rf"\S{{{limit + 1},}}", lambda m: clip(m.group(0), limit), text)
