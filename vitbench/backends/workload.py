"""What a backend times: the `Step` a trial describes, the prepared `Workload` on the device (and the matmul one of
the peak measurement), and the stopping rule of every timer (`StopRule`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from vitbench.backends.kinds import DEFAULT_DEVICES, DEFAULT_PARALLELISM, OPTIMIZERS, PRECISIONS, Mode
from vitbench.backends.parallel import parallelism_names
from vitbench.errors import ConfigError

if TYPE_CHECKING:
    from vitbench.models.specs import ModelSpec

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
    # Local devices the step runs on: `batch_size` is the GLOBAL batch of one step, split evenly over them.
    devices: int = DEFAULT_DEVICES
    parallelism: str = DEFAULT_PARALLELISM.value
    # `model` resolved once: the trial's own (its task's Params.spec), else parsed when the step is made; never
    # None after construction, and not a field of the config (to_dict) nor of the step's equality. Backends and
    # measurements read the architecture from here, never by parsing `model` again.
    spec: ModelSpec | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, value, allowed in (("mode", self.mode, get_args(Mode)),
                                     ("precision", self.precision, PRECISIONS),
                                     ("optimizer", self.optimizer, OPTIMIZERS),
                                     ("parallelism", self.parallelism, parallelism_names())):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.devices < 1:
            raise ConfigError(f"devices must be >= 1, got {self.devices}")
        if self.batch_size % self.devices:
            raise ConfigError(f"batch_size {self.batch_size} does not split evenly over {self.devices} devices: "
                              f"use a multiple of {self.devices}")
        if self.spec is None:  # parsed here, once; `model` becomes its canonical name (an alias resolved)
            from vitbench.models.specs import get_spec

            object.__setattr__(self, "spec", get_spec(self.model))
            object.__setattr__(self, "model", self.spec.name)
        elif self.spec.name != self.model:  # a spec carried over to another model (dataclasses.replace)
            raise ValueError(f"Step: the spec of {self.spec.name} given for the model {self.model}")

    @property
    def per_device_batch(self) -> int:
        return self.batch_size // self.devices

    @classmethod
    def of(cls, fields: Mapping[str, Any], **override) -> Step:
        """The step a trial's (or command's) fields describe; fields a step does not use are ignored (`spec`: the
        trial's resolved model, passed as an override)."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in {**fields, **override}.items() if k in names and v is not None})

    def to_dict(self) -> dict:
        """The step's fields; `devices` and `parallelism` only where they differ from one device, data parallel,
        so the config of every one-device measurement is what it was before these fields existed."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "spec"}
        for name, default in (("devices", DEFAULT_DEVICES), ("parallelism", DEFAULT_PARALLELISM.value)):
            if d[name] == default:
                del d[name]
        return d


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

    def infer_host(self, images: Any) -> Any:
        """A forward step on the host's `images` (float32 NHWC numpy in [-1, 1], exactly `batch_size` of them, the
        transfer primitives' layout): their outputs copied back to the host (float32 numpy, (batch_size,
        classes)), the device synchronised. What a server answers a batch of queries with (the `serve` task,
        vitbench.measure.loadgen); an infer workload only. Default: NotImplementedError, a workload that runs on
        its own device-resident input only (the task then says so and feeds no host images)."""
        raise NotImplementedError(f"{type(self).__name__} takes no host images")

    def weights_host(self) -> dict:
        """The model's parameters now (after the steps run so far), whole, float32 numpy by the framework's own
        names: what the multi-device equivalence check compares (vitbench.measure.group_check)."""
        raise NotImplementedError(f"{type(self).__name__} does not give its weights")

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


# A timer's hard cap on steps, whatever the rule's seconds: a step too fast for the clock to move cannot loop for
# ever (no measurement in vitbench times this many).
MAX_STEPS = 100_000


@dataclass(frozen=True)
class StopRule:
    """When a timer stops (shared by every backend's `time_steps` and `time_windows`, and by a loop that plans
    its length from it, vitbench.protocols.input_bench): after `min_steps` steps, `min_seconds` and `min_windows`
    windows are all reached, or at once at `max_seconds` or `max_steps`. Latency timing is windows of one step.
    A task's timing fields declare the defaults (vitbench.tasks.bench.Timing, `stop_rule()`); the rule has none
    of its own."""

    min_steps: int
    min_seconds: float
    max_seconds: float
    min_windows: int = 1
    max_steps: int = MAX_STEPS

    def done(self, windows: int, steps: int, elapsed_s: float) -> bool:
        """Whether a timer that has run `windows` windows of `steps` steps in all, in `elapsed_s`, stops."""
        if steps >= self.max_steps or elapsed_s >= self.max_seconds:
            return True
        return steps >= self.min_steps and elapsed_s >= self.min_seconds and windows >= self.min_windows
