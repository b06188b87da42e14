"""What a backend times: the `Step` a trial describes, the prepared `Workload` on the device (and the matmul one of
the peak measurement), and the stopping rule of every timer (`window_done`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from vitbench.backends.kinds import OPTIMIZERS, PRECISIONS, Mode
from vitbench.errors import ConfigError

@dataclass(frozen=True)
class Step:
    """What one timed step computes: a model at an input size, forward (infer) or a training update (train)."""

    model: str
    mode: Mode = "infer"
    batch_size: int = 1
    resolution: int | None = None  # None: the variant's native resolution
    num_classes: int | None = None  # None: the variant's default
    precision: str = "fp32"
    compile: bool = False
    compile_mode: str | None = None  # None: the compiler's default mode
    channels_last: bool | None = None  # None: on for conv families (bit, hybrid), off for vit
    optimizer: str = "adam"  # train only
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value, allowed in (("mode", self.mode, ("infer", "train")),
                                     ("precision", self.precision, PRECISIONS),
                                     ("optimizer", self.optimizer, OPTIMIZERS)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")

    @classmethod
    def of(cls, fields: Mapping[str, Any], **override) -> Step:
        """The step a trial's (or command's) fields describe; fields a step does not use are ignored."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in {**fields, **override}.items() if k in names and v is not None})

    def to_dict(self) -> dict:
        return asdict(self)


class Workload(ABC):
    """A prepared step on the device. `step()` may return before the device is done; `sync()` waits."""

    batch_size: int
    compile_s: float | None = None  # explicit compile time where the backend separates it (ahead-of-time)
    # The numerics in force for this step, as the framework reports them after the backend set them (matmul
    # precision, TF32 flags, autocast dtype, compile mode): recorded in every row.
    settings: Mapping[str, Any] = {}

    @abstractmethod
    def step(self) -> Any: ...

    @abstractmethod
    def sync(self, out: Any) -> None: ...

    def state_bytes(self) -> int | None:
        """Bytes the step keeps on the device between steps (weights, gradients, optimizer state, inputs), counted
        from the arrays themselves; None where unknown."""
        return None

    def sync_window(self, outs: list[Any]) -> None:
        """Wait for every step of a window (outputs in order). Default: sync each; a backend whose steps run in
        order on one queue may wait for the last only."""
        for out in outs:
            self.sync(out)

    def close(self) -> None:  # free device memory held by the workload
        pass


class MatmulWorkload(Workload):
    """One a @ b per step (the matmul peak, `vitbench doctor`): its operands and result readable on the host."""

    batch_size = 1
    a: Any  # the operands, on the device
    b: Any

    def operands_host(self) -> tuple[Any, Any]:
        """(a, b) as float32 numpy arrays."""
        return self.result_host(self.a), self.result_host(self.b)

    @abstractmethod
    def result_host(self, out: Any) -> Any:
        """A step's result as a float32 numpy array."""


def window_done(windows: int, steps: int, elapsed_s: float, min_steps: int, min_seconds: float,
                max_seconds: float, min_windows: int, max_steps: int) -> bool:
    """The stopping rule of `time_windows` (shared by every backend's timer)."""
    if steps >= max_steps or elapsed_s >= max_seconds:
        return True
    return steps >= min_steps and elapsed_s >= min_seconds and windows >= min_windows
