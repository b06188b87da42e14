"""JAX/Flax backend: jit-compiled forward and train step, AOT compile timed apart, block_until_ready sync.

- Compile: `jax.jit(f).lower(*args).compile()` in `prepare`; its time is `Workload.compile_s` and every step
  calls the compiled executable, so no tracing or compilation ever lands inside a timed step.
- Sync: `jax.block_until_ready` on everything a step returns (for training: the new params and optimizer state,
  not just the loss, which is ready before the update is).
- Precision: fp32; bf16 = mixed precision (float32 params, bf16 compute, float32 logits/loss, like torch
  autocast); fp16 for inference only (training in fp16 needs loss scaling, which this backend does not do: use
  bf16). Matmul precision is JAX's default for the platform (recorded as `matmul_precision`; on TPU "default"
  runs float32 matmuls in bf16 passes -- set the `jax_default_matmul_precision` config to "highest" for true
  fp32 there). fp16 is refused on CPU, where XLA has no fp16 dot with fp32 accumulation.
- Train step: softmax cross-entropy, optax clip_by_global_norm(1.0) (the paper's gradient clipping) then Adam
  (beta 0.9/0.999, the paper's pre-training optimiser) or SGD momentum 0.9 (fine-tuning); lr 1e-3 and no weight
  decay, the same as the torch backend; params and optimizer state are donated (updated in place).
- Memory: on GPU/TPU the allocator's `peak_bytes_in_use` from `device.memory_stats()` (JAX cannot reset it, so it
  is the peak since the process started; vitbench runs one measurement per process where it matters); on CPU
  the growth of the process's peak RSS (vitbench.procmem.PeakRSS), as for torch.
- GPU memory: XLA_PYTHON_CLIENT_PREALLOCATE=false is set (unless the user set it) before JAX creates its GPU
  client, so JAX does not grab 75 % of the device up front: peaks and the largest batch are then the model's,
  not the preallocation's. Out-of-memory surfaces as RESOURCE_EXHAUSTED and is caught as an OOM.
- CPU threads: XLA's CPU client sizes its thread pools from the CPUs the process may run on when JAX first
  initialises; there is no runtime setting. `threads=N` therefore restricts the process's CPU affinity to N CPUs
  while the client is created (plus --xla_cpu_multi_thread_eigen=false for N=1) and then gives every thread its
  CPUs back, so the pools have N threads that the OS schedules freely. Once JAX is initialised the count is
  fixed: asking for another raises ConfigError. threads=None leaves JAX's default (all allowed CPUs).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before jax creates a GPU client (see above)

import gc  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from vitbench.backends.base import Backend, RunSettings, Workload  # noqa: E402
from vitbench.errors import BackendUnavailable, ConfigError  # noqa: E402
from vitbench.models.specs import ModelSpec, get_spec  # noqa: E402
from vitbench.procmem import PeakRSS, peak_rss_mib  # noqa: E402

_PRECISIONS = ("fp32", "bf16", "fp16")
_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
LEARNING_RATE = 1e-3  # same as the torch backend's optimizers
CLIP_NORM = 1.0  # ViT paper, fine-tuning: "gradient clipping at global norm 1"

_state: dict[str, Any] = {"cpu_threads": None}  # what this module initialised the CPU client with


def _jax_initialised() -> bool:
    """Has JAX already created its platform clients (after which thread pools and allocators are fixed)?"""
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # noqa: BLE001 - private API moved: assume the worst
        return True


def _init_cpu_client(threads: int | None) -> int:
    """Create JAX's clients, with the CPU pools sized to `threads` CPUs if JAX is not initialised yet.

    Returns the CPU thread count the client was created with (best knowledge)."""
    if _state["cpu_threads"] is not None:
        return _state["cpu_threads"]
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count()))
    if _jax_initialised():  # someone else created the client: it uses the CPUs allowed back then
        _state["cpu_threads"] = len(allowed)
        return len(allowed)
    n = len(allowed) if threads is None else min(threads, len(allowed))
    if threads == 1 and "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    restrict = n < len(allowed) and hasattr(os, "sched_setaffinity")
    if restrict:
        os.sched_setaffinity(0, allowed[:n])
    try:
        import jax

        jax.devices()  # creates the clients (and their thread pools) now
    finally:
        if restrict:
            _restore_affinity(allowed)
    _state["cpu_threads"] = n
    return n


def _restore_affinity(cpus: list[int]) -> None:
    """Give every thread of the process (XLA's new pool threads inherited the restricted mask) its CPUs back:
    the pools keep their size, the OS schedules them freely (as torch.set_num_threads would)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def _dtype(precision: str):
    import jax.numpy as jnp

    if precision not in _PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; allowed: {', '.join(_PRECISIONS)}")
    return {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}[precision]


def make_optimizer(name: str, lr: float = LEARNING_RATE):
    """optax: clip_by_global_norm(1.0) then adam (beta 0.9/0.999) or sgd (momentum 0.9)."""
    import optax

    if name == "adam":
        opt = optax.adam(lr, b1=0.9, b2=0.999)
    elif name == "sgd":
        opt = optax.sgd(lr, momentum=0.9)
    else:
        raise ConfigError(f"unknown optimizer {name!r}; allowed: adam, sgd")
    return optax.chain(optax.clip_by_global_norm(CLIP_NORM), opt)


def random_params(model, resolution: int, seed: int = 0) -> dict:
    """Random float32 weights with the model's shapes, drawn on the host (numpy), for measurements.

    Kernels N(0, 1/fan_in), norm scales 1, biases 0, class token 0, position embeddings N(0, 0.02^2), head
    included (non-zero, so a training step's gradients reach every layer from the first step on). Unlike
    `init_params` (the model's own initialisers) this compiles nothing: a jitted init costs seconds of XLA
    compile per model, which is pure overhead for a throughput or memory probe.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vitbench.models.convert import flatten, unflatten

    x = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
    shapes = flatten(dict(jax.eval_shape(model.init, jax.random.PRNGKey(0), x)["params"]))
    rng = np.random.default_rng(seed)
    out = {}
    for path, leaf in shapes.items():
        shape, name = tuple(leaf.shape), path.split("/")
        if name[-1] == "kernel":
            # DenseGeneral q/k/v kernels are (D, heads, head_dim): their fan-in is D
            fan_in = shape[0] if name[-2] in ("query", "key", "value") else int(np.prod(shape[:-1]))
            arr = rng.standard_normal(shape, np.float32) / np.float32(np.sqrt(fan_in))
        elif name[-1] == "scale":
            arr = np.ones(shape, np.float32)
        elif name[-1] == "pos_embedding":
            arr = 0.02 * rng.standard_normal(shape, np.float32)
        else:  # biases, class token
            arr = np.zeros(shape, np.float32)
        out[path] = arr
    return unflatten(out)


class JaxWorkload(Workload):
    """A compiled step and its device-resident arguments. `step()` returns without waiting (async dispatch)."""

    def __init__(self, executable, args: tuple, batch_size: int, task: str, compile_s: float, lower_s: float):
        self.executable, self.args, self.batch_size, self.task = executable, args, batch_size, task
        self.compile_s = compile_s  # lower (trace) + XLA compile, seconds
        self.lower_s = lower_s

    def step(self):
        if self.task == "infer":
            return self.executable(*self.args)
        state, loss = self.executable(*self.args)  # args = (state, x, y); state is donated
        self.args = (state, *self.args[1:])
        return state, loss

    def sync(self, out) -> None:
        import jax

        jax.block_until_ready(out)

    def close(self) -> None:
        import jax

        for leaf in jax.tree_util.tree_leaves(self.args):
            if isinstance(leaf, jax.Array) and not leaf.is_deleted():
                leaf.delete()
        self.executable = None
        self.args = ()


class JaxBackend(Backend):
    name = "jax"

    def __init__(self) -> None:
        self.device = None
        self.device_str = "cpu"
        self._rss = PeakRSS()

    # -- setup ---------------------------------------------------------------------------------------
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        kind, _, index = device.partition(":")
        platform = _PLATFORMS.get(kind)
        if platform is None or (index and not index.isdigit()):
            raise ConfigError(f"unknown device {device!r}; allowed: cpu, gpu|cuda[:N], tpu[:N]")
        if threads is not None and threads < 1:
            raise ConfigError(f"threads must be >= 1, got {threads}")
        n_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if platform == "cpu" and threads is not None and threads > n_cpus:
            raise ConfigError(f"threads={threads}, but this process may use {n_cpus} CPU(s); XLA sizes its CPU "
                              f"pools by the CPUs available, so use threads <= {n_cpus}")
        cpu_threads = _init_cpu_client(threads if platform == "cpu" else None)
        if platform == "cpu" and threads is not None and threads != cpu_threads:
            raise ConfigError(
                f"threads={threads} requested, but JAX's CPU client was already created with {cpu_threads} "
                "threads in this process (XLA fixes its pools at start-up); run in a fresh process or use "
                f"threads={cpu_threads}")
        import jax

        try:
            devices = jax.devices(platform)
        except RuntimeError as e:
            raise BackendUnavailable(f"device {device!r} requested but JAX has no {platform} backend here "
                                     f"({e}); use --device cpu") from e
        i = int(index or 0)
        if i >= len(devices):
            raise BackendUnavailable(f"device {device!r}: only {len(devices)} {platform} device(s) present")
        self.device, self.device_str = devices[i], device
        return {
            "backend": "jax",
            "device": device,
            "device_name": getattr(self.device, "device_kind", platform),
            "platform": platform,
            "threads": cpu_threads if platform == "cpu" else None,
            "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            **self.versions(),
        }

    def _dev(self):
        if self.device is None:
            self.setup("cpu")
        return self.device

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        out = {}
        for pkg in ("jax", "jaxlib", "flax", "optax"):
            try:
                out[pkg] = version(pkg)
            except Exception:  # noqa: BLE001
                out[pkg] = "?"
        return out

    # -- model + step ---------------------------------------------------------------------------------
    def prepare(self, settings: RunSettings) -> JaxWorkload:
        import jax
        import jax.numpy as jnp
        import optax

        from vitbench.models.flax import build_flax_model

        dtype = _dtype(settings.precision)
        if settings.task not in ("infer", "train"):
            raise ConfigError(f"unknown task {settings.task!r}; allowed: infer, train")
        if settings.task == "train" and settings.precision == "fp16":
            raise ConfigError("precision fp16 is inference-only on the jax backend (fp16 training needs loss "
                              "scaling); use --precision bf16 for mixed-precision training")
        if settings.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {settings.batch_size}")
        dev = self._dev()
        if settings.precision == "fp16" and dev.platform == "cpu":
            raise ConfigError("precision fp16 is not available on the jax backend's CPU device (XLA's CPU dot "
                              "has no fp16 x fp16 -> fp32 form); use --precision bf16, or fp16 on a GPU")
        spec = get_spec(settings.model)
        res = settings.resolution or spec.resolution
        k = settings.num_classes or spec.num_classes
        model = build_flax_model(spec, res, k, dtype=dtype)
        # inputs first, images before labels: an impossible batch fails (RESOURCE_EXHAUSTED) before anything
        # else is built. The 'rbg' generator: threefry's kernels take seconds to compile for each new shape.
        key_x, key_y = jax.random.split(jax.random.key(settings.seed, impl="unsafe_rbg"))
        with jax.default_device(dev):
            # NHWC, already in the compute dtype (torch autocast casts them inside the first layer)
            x = jax.random.normal(key_x, (settings.batch_size, res, res, 3), jnp.float32).astype(dtype)
            jax.block_until_ready(x)  # dispatch is async: surface an allocation failure here
            y = jax.random.randint(key_y, (settings.batch_size,), 0, k)
        params = jax.device_put(random_params(model, res, settings.seed), dev)
        if settings.task == "infer":
            def forward(p, xb):
                return model.apply({"params": p}, xb)

            args: tuple = (params, x)
            jitted = jax.jit(forward)
        else:
            tx = make_optimizer(settings.optimizer)

            def loss_fn(p, xb, yb):
                logits = model.apply({"params": p}, xb, train=True)
                return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), yb).mean()

            def train_step(state, xb, yb):
                p, opt_state = state
                loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
                updates, opt_state = tx.update(grads, opt_state, p)
                return (optax.apply_updates(p, updates), opt_state), loss

            state = (params, tx.init(params))  # zeros like params, on params' device
            args = (state, x, y)
            # donate the state: XLA updates params and optimizer state in place (no second copy)
            jitted = jax.jit(train_step, donate_argnums=0)
        t0 = time.perf_counter()
        lowered = jitted.lower(*args)
        t1 = time.perf_counter()
        executable = lowered.compile()
        t2 = time.perf_counter()
        return JaxWorkload(executable, args, settings.batch_size, settings.task, compile_s=t2 - t0,
                           lower_s=t1 - t0)

    # -- memory --------------------------------------------------------------------------------------
    def _device_stats(self) -> dict | None:
        try:
            return self._dev().memory_stats()
        except Exception:  # noqa: BLE001 - not every platform implements it
            return None

    def reset_peak_memory(self) -> None:
        gc.collect()
        self._rss.reset()  # CPU; the device allocator's peak cannot be reset from JAX

    def peak_memory_mib(self) -> float:
        stats = self._device_stats()
        if stats and "peak_bytes_in_use" in stats:
            return stats["peak_bytes_in_use"] / 2**20
        return self._rss.growth_mib()

    def process_peak_mib(self) -> float:
        """Whole-process peak: device allocator peak on GPU/TPU, peak RSS on CPU (what a budget compares to)."""
        stats = self._device_stats()
        if stats and "peak_bytes_in_use" in stats:
            return stats["peak_bytes_in_use"] / 2**20
        return peak_rss_mib()

    def cleanup(self) -> None:
        # the failed step's buffers are freed once unreferenced; compiled executables are small and kept
        gc.collect()

    # -- FLOPs & peak ----------------------------------------------------------------------------------
    def count_flops(self, spec: ModelSpec, resolution: int, num_classes: int) -> dict[str, dict]:
        """XLA's cost analysis of the compiled forward for one image (shapes only: nothing is allocated)."""
        import jax
        import jax.numpy as jnp

        from vitbench.models.flax import build_flax_model

        model = build_flax_model(spec, resolution, num_classes)
        x = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
        variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
        compiled = jax.jit(model.apply).lower(variables, x).compile()
        cost = compiled.cost_analysis()
        if isinstance(cost, (list, tuple)):  # older jax: one dict per computation
            cost = cost[0] if cost else {}
        flops = float((cost or {}).get("flops", 0.0))
        if flops <= 0:
            return {}
        return {"xla": {
            "macs": flops / 2,  # XLA counts FLOPs: 2 per multiply-accumulate
            "excludes": "transcendentals (exp, erf, rsqrt: counted apart by XLA); includes elementwise work "
                        "(norms, softmax, GELU/ReLU, adds, weight standardisation) at ~1 FLOP per element",
            "transcendentals": float((cost or {}).get("transcendentals", 0.0)),
        }}

    def matmul_flops_per_s(self, precision: str = "fp32", n: int = 2048, seconds: float = 1.0) -> float:
        import jax
        import jax.numpy as jnp

        dtype = _dtype(precision)
        dev = self._dev()
        ka, kb = jax.random.split(jax.random.PRNGKey(0))
        with jax.default_device(dev):
            a = jax.random.normal(ka, (n, n), jnp.float32).astype(dtype)
            b = jax.random.normal(kb, (n, n), jnp.float32).astype(dtype)
        mm = jax.jit(jnp.matmul).lower(a, b).compile()

        class _MM(Workload):
            batch_size = 1

            def step(self_):
                return mm(a, b)

            def sync(self_, out):
                jax.block_until_ready(out)

        work = _MM()
        for _ in range(2):
            work.sync(work.step())
        times = sorted(self.time_steps(work, min_steps=5, min_seconds=seconds, max_seconds=10 * seconds))
        return 2 * n**3 / times[len(times) // 2]  # 2 FLOPs per MAC, median step
