"""The small vocabulary of the backend interface: modes, precisions, optimizers, device/timer/memory/attention
kinds and capabilities. Plain values and enums (vitbench.choices.Choice); nothing of a framework or of the
registry is imported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vitbench.choices import Choice

Mode = Literal["infer", "train"]
# Compute precisions a study may ask for. fp32 = full IEEE fp32 matmuls and convolutions on every backend; tf32 =
# fp32 storage with TF32 tensor-core matmuls (NVIDIA Ampere and later); bf16/fp16 = mixed precision (autocast);
# int8 = int8 weights with activations quantised at run time (a runtime's dynamic quantization), inference only.
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "int8")
# Where tf32 is not: TF32 is a tensor-core format of NVIDIA GPUs from Ampere on (NVIDIA A100 Tensor Core GPU
# Architecture whitepaper, 2020); a TPU's fp32 matmuls are passes of bf16 (Cloud TPU docs, "bfloat16"). Each
# backend's parse-time check refuses it off a GPU in these words, so that a study over several backends says it once.
TF32_OFF_GPU = ("tf32 is an NVIDIA GPU tensor-core format (Ampere and later): a CPU has none, and a TPU's fp32 "
                "matmuls are bf16 passes; use fp32 (full fp32) or bf16")
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")  # adam: the paper's pre-training; sgd: momentum 0.9, fine-tuning


class DeviceKind(Choice):
    """What kind of processor a device is: decides where a peak comes from and what a measured peak is keyed by."""

    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


@dataclass(frozen=True)
class Device:
    """The physical device a backend runs on, named as the driver names it (the same on every framework)."""

    kind: DeviceKind
    name: str  # "cpu", "NVIDIA H100 80GB HBM3", "TPU v5 lite": what a datasheet peak is matched against
    index: int = 0
    uuid: str | None = None  # GPU UUID where the framework tells (finds the NVML handle)
    pci_bus_id: str | None = None


class TimerKind(Choice):
    """What a backend's timed steps are measured with."""

    DEVICE_EVENTS = "device_events"  # events recorded on the device's stream (CUDA events): device time
    HOST_CLOCK = "host_clock"  # host wall clock around step(s) + sync: exact for synchronous devices (CPU)


class MemoryKind(Choice):
    """What a backend's peak memory number is; numbers of different kinds do not compare."""

    ALLOCATOR = "allocator"  # the device allocator's peak of allocated bytes (torch.cuda.max_memory_allocated)
    # the process's resident set on a CPU: before the steady phase, growth of its peak over the RSS before the
    # model was built (compilation included); in it, the step's state (its arrays' bytes) + the growth of the
    # peak during the steps (activations, workspace)
    HOST_RSS = "host_rss"
    XLA_PLANNED = "xla_resident_plus_temp"  # bytes in use on the device + XLA's planned temp buffers of the step
    # torch replaying CUDA graphs (torch.compile's reduce-overhead, max-autotune): the graphs' buffers live in
    # private pools, allocated once at capture and reserved, not allocated, while a replay uses them, so the
    # allocated peak of replayed steps leaves the step's activations out (H200, ViT-B/16 bf16 b64: 367 MiB
    # against 593 compiled without graphs); the reserved peak holds them (docs/measurement.md, Memory kinds)
    RESERVED = "allocator_reserved"


class AttentionKernel(Choice):
    """Which attention implementation ran, as the framework reports it."""

    FLASH = "flash"
    MEMORY_EFFICIENT = "memory_efficient"
    CUDNN = "cudnn"
    MATH = "math"  # the framework's reference composition (matmul, softmax, matmul) inside its SDPA op
    UNFUSED = "unfused"  # the model computes attention itself (no fused op called)
    XLA = "xla"  # XLA fusions of dot + softmax (no fused attention custom call)
    NONE = "none"  # the model has no attention (BiT)
    NOT_VISIBLE = "not_visible"  # the framework does not tell (a replayed CUDA graph; compiled code calling no
    # attention kernel of the framework's)


class Parallelism(Choice):
    """How a step is spread over `devices` local devices (the trial field `parallelism`)."""

    DP = "dp"  # data parallel: the batch split over the devices, parameters replicated, gradients all-reduced
    FSDP = "fsdp"  # fully sharded data parallel: the batch split, parameters (and gradients, optimizer state) sharded


DEFAULT_PARALLELISM = Parallelism.DP
DEFAULT_DEVICES = 1  # one device: what every measurement before the `devices` field ran on


class Capability(Choice):
    """What a backend can do; tasks declare the capabilities they need (checked when a study is parsed)."""

    INFER = "infer"  # timed forward steps
    TRAIN = "train"  # timed training steps
    MEMORY = "memory"  # peak memory of a step
    MAX_BATCH = "max_batch"  # steps in a probe process, out-of-memory detected
    FLOPS = "flops"  # its own FLOP counters
    MATMUL_PEAK = "matmul_peak"  # a dense-matmul throughput measurement (MFU denominator, calibration)
    COMPILE = "compile"  # an optional graph compiler for eager models (the `compile` field)
    TRANSFER = "transfer"  # pre-training, features, fine-tuning (vitbench.transfer protocols)
    ATTENTION = "attention"  # attention probabilities of a ViT/hybrid, for inspection (vitbench.insight)

    @property
    def does(self) -> str:
        """What a backend with this capability can do, as a message says it: "cannot {does}"."""
        return _DOES[self]


_DOES = {Capability.INFER: "infer", Capability.TRAIN: "train", Capability.MEMORY: "measure a step's memory",
         Capability.MAX_BATCH: "search the largest batch", Capability.FLOPS: "count FLOPs",
         Capability.MATMUL_PEAK: "time a dense matmul (the peak, the calibration)",
         Capability.COMPILE: "compile optionally", Capability.TRANSFER: "pre-train, embed or fine-tune",
         Capability.ATTENTION: "give attention maps"}
