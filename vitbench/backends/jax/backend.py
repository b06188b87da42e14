"""JAX/Flax backend: jit-compiled forward and train step, AOT compile timed apart, block_until_ready sync.

- Compile: `jax.jit(f).lower(*args).compile()` in `prepare`; its time is `Workload.compile_s` and every step
  calls the compiled executable, so no tracing or compilation ever lands inside a timed step.
- Sync: `jax.block_until_ready` on everything a step returns (for training: the new params and optimizer state,
  not just the loss, which is ready before the update is).
- Precision: fp32 = full fp32 dots and convolutions: the step is traced under
  `jax.default_matmul_precision("highest")` (JAX's own default is not fp32 everywhere: TF32 on NVIDIA GPUs, bf16
  passes on TPU; JAX docs, `jax.default_matmul_precision` / `jax.lax.Precision`); tf32 = traced under
  "tensorfloat32" (fp32 storage, TF32 dots; NVIDIA GPUs only); bf16 = mixed precision (float32 params, bf16
  matmuls and convolutions, float32 norms, residual stream and logits/loss: CUDA autocast's split, the models'
  vitbench.models.layers.flax.NORM_DTYPE), its remaining fp32 dots at "highest"; fp16 for inference
  only (training in fp16 needs loss scaling, which this backend does not do: use bf16). The precision of every
  dot and convolution of the lowered step is read back from its StableHLO and recorded. fp16 is refused on CPU,
  where XLA has no fp16 dot with fp32 accumulation.
- Train step: softmax cross-entropy, then the optimiser of `training.py` (clip at global norm 1, the paper's
  gradient clipping; Adam beta 0.9/0.999, the paper's pre-training optimiser, or SGD momentum 0.9), lr and
  weight decay from OptimConfig's defaults, the same as the torch backend; params and optimizer state are
  donated (updated in place).
- Memory: on CPU the growth of the process's peak RSS (vitbench.procmem.PeakRSS), as for torch; the steady
  steps' phase starts after the heap's free memory (XLA's compiler scratch) went back to the OS. On GPU/TPU the
  allocator's `peak_bytes_in_use` (JAX cannot reset it: it is the peak since the process started, compilation
  and autotuning included); for the steady steps: that peak if it rose during them (then they set it), else the
  bytes in use when they started plus the temp buffers XLA planned for the step (`memory_analysis()`).
- Clients, GPU preallocation and CPU threads: see `client.py`; the precisions' dtypes and read-back: `numerics.py`;
  the measured steps: `workload.py`; transfer training: `training.py` (masked patch prediction: `masked_patch.py`).
"""

from __future__ import annotations

import gc
import time

import jax
import jax.numpy as jnp
import numpy as np

from vitbench import value_cache
from vitbench.backends.base import (
    AttentionKernel,
    Backend,
    Device,
    DeviceKind,
    MatmulWorkload,
    MemoryKind,
    Step,
    Workload,
)
from vitbench.backends.jax import (
    SPEC,
    cache,
    client,  # sets GPU_MEMORY_ENV on import; JAX reads it when setup creates the client
    training,
)
from vitbench.backends.jax.numerics import MATMUL_PRECISION, compute_dtype, step_numerics
from vitbench.backends.jax.workload import JaxWorkload, Matmul
from vitbench.cpus import capped_threads
from vitbench.models.families import family_modules, family_plugin
from vitbench.models.flax import gpu_memory_settings
from vitbench.models.specs import ModelSpec
from vitbench.procmem import PeakRSS, peak_rss_mib
from vitbench.transfer.schedules import OptimConfig

_PLATFORM_KINDS = {"cpu": DeviceKind.CPU, "gpu": DeviceKind.GPU, "tpu": DeviceKind.TPU}


def param_shapes(model, resolution: int) -> list[tuple[str, tuple[int, ...]]]:
    """The model's parameters as (path, shape) in `param_table.flatten`'s order, traced (jax.eval_shape of the
    model's init: no compile, nothing allocated)."""
    from vitbench.models.param_table import flatten

    x = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
    # the key made inside the traced function: a concrete PRNGKey(0) would be one more compile
    shapes = flatten(dict(jax.eval_shape(lambda xb: model.init(jax.random.PRNGKey(0), xb), x)["params"]))
    return [(path, tuple(int(d) for d in leaf.shape)) for path, leaf in shapes.items()]


def _shapes(value) -> list[tuple[str, tuple[int, ...]]]:
    """Shapes read back from the value cache (JSON lists), checked: [[path, [dims]], ...]."""
    out = []
    for path, shape in value:
        if not isinstance(path, str) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape):
            raise ValueError(f"parameter shapes: {path!r} {shape!r}")
        out.append((path, tuple(shape)))
    if not out:
        raise ValueError("parameter shapes: none")
    return out


def cached_param_shapes(model, spec: ModelSpec, resolution: int, num_classes: int, dtype,
                        device: str) -> list[tuple[str, tuple[int, ...]]]:
    """`param_shapes`, from the value cache (vitbench.value_cache) when they were traced before for the same
    model, resolution, classes, compute dtype and device with the same code, jax/jaxlib/flax and settings: the
    trace of the model's init is a large part of a warm trial's set-up, and JAX caches only compiled modules."""
    request = {"spec": spec.flat(), "resolution": resolution, "num_classes": num_classes,
               "dtype": jnp.dtype(dtype).name, "device": device, "x64": bool(jax.config.jax_enable_x64)}
    return value_cache.remembered("jax_param_shapes", request, SPEC.distributions,
                                  lambda: [[p, list(s)] for p, s in param_shapes(model, resolution)],
                                  decode=_shapes, modules=family_modules(spec.family)).value


def random_params(model, resolution: int, seed: int = 0,
                  shapes: list[tuple[str, tuple[int, ...]]] | None = None) -> dict:
    """Random float32 weights with the model's shapes (`shapes`, else traced: `param_shapes`), drawn on the host
    (numpy), for measurements.

    Kernels N(0, 1/fan_in), norm scales 1, biases 0, class token 0, position embeddings N(0, 0.02^2), head
    included (non-zero, so a training step's gradients reach every layer from the first step on). Unlike
    `init_params` (the model's own initialisers) this compiles nothing: a jitted init costs seconds of XLA
    compile per model, which is pure overhead for a throughput or memory probe.
    """
    from vitbench.models.param_table import unflatten

    rng = np.random.default_rng(seed)
    out = {}
    for path, shape in (param_shapes(model, resolution) if shapes is None else shapes):
        name = path.split("/")
        if name[-1] == "kernel":
            # DenseGeneral q/k/v kernels are (D, heads, head_dim): their fan-in is D
            fan_in = shape[0] if name[-2] in ("query", "key", "value") else int(np.prod(shape[:-1]))
            arr = rng.standard_normal(shape, np.float32) / np.float32(np.sqrt(fan_in))
        elif name[-1] == "scale":
            arr = np.ones(shape, np.float32)
        elif name[-1] in ("pos_embedding", "pos_embedding_x", "pos_embedding_y", "rel_embedding"):
            arr = 0.02 * rng.standard_normal(shape, np.float32)
        else:  # biases, class token
            arr = np.zeros(shape, np.float32)
        out[path] = arr
    return unflatten(out)


class JaxBackend(Backend):
    spec = SPEC

    def __init__(self) -> None:
        self.device = None
        self._rss = PeakRSS()
        self.compile_s = 0.0
        self._phase: dict = {}  # accelerators: allocator state when the steady phase started, its workload's temp
        self._state_mib = 0.0  # CPU, steady phase: the step's arrays

    # -- setup ---------------------------------------------------------------------------------------
    def setup(self, device: str = "cpu", threads: int | None = None, devices: int = 1) -> dict:
        from vitbench.backends.jax.mesh import COLLECTIVES

        threads, capped = capped_threads(threads)
        self.device, platform, cpu_threads = client.select_device(device, threads, self.spec.devices, devices)
        cache_path = cache.enable()  # before the first compile of this process
        return {
            "backend": self.name,
            "device": device,
            "device_name": getattr(self.device, "device_kind", platform),
            "platform": platform,
            "threads": cpu_threads,
            **({"collective_backend": COLLECTIVES.get(platform, platform)} if devices > 1 else {}),
            **capped,
            "default_matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
            **gpu_memory_settings(),
            "xla_flags": client.os.environ.get("XLA_FLAGS", ""),
            "compile_cache": str(cache_path) if cache_path else None,
            **self.versions(),
        }

    def compile_cache_counts(self) -> tuple[int, int]:
        return cache.counts()

    def _dev(self):
        if self.device is None:
            self.setup("cpu")
        return self.device

    def device_info(self) -> Device:
        dev = self._dev()
        kind = _PLATFORM_KINDS.get(dev.platform, DeviceKind.GPU)
        if kind is DeviceKind.CPU:
            return Device(DeviceKind.CPU, "cpu")
        hw = getattr(dev, "local_hardware_id", None)  # the driver's ordinal (CUDA device index)
        return Device(kind, str(getattr(dev, "device_kind", dev.platform)), int(dev.id if hw is None else hw))

    def put(self, x):
        """A host array on this backend's device."""
        return jax.device_put(x, self._dev())

    # -- model + step ---------------------------------------------------------------------------------
    def prepare(self, step: Step) -> JaxWorkload:
        self._refuse(precision=step.precision, mode=step.mode, device=self._dev().platform)
        lowered, args, spec, lower_s = self.lower(step)
        t0 = time.perf_counter()
        executable = lowered.compile()
        compile_s = lower_s + time.perf_counter() - t0  # trace + lower + XLA compile
        settings = step_numerics(step.precision, lowered.as_text())
        return JaxWorkload(executable, args, step.batch_size, step.mode, compile_s=compile_s, lower_s=lower_s,
                           settings=settings, has_attention=family_plugin(spec.family).attention_of(spec).layers)

    def lower(self, step: Step):
        """(lowered step, its device-resident arguments, the model spec, seconds spent tracing and lowering): the
        step traced under its precision's
        matmul setting and lowered, not compiled. `prepare` compiles it; tests and `lowered_precisions` read it
        (it does not check that the device can run the precision)."""
        import optax

        from vitbench.models.flax import build_flax_model

        dtype = compute_dtype(step.precision)
        dev = self._dev()
        spec = step.spec
        res = spec.resolution if step.resolution is None else step.resolution
        k = step.num_classes or spec.num_classes
        model = build_flax_model(spec, res, k, dtype=dtype)
        # inputs first: an impossible batch fails (RESOURCE_EXHAUSTED) before anything else is built. The 'rbg'
        # generator: threefry's kernels take seconds to compile for each new shape. One jitted function makes
        # the key, images and labels: one small compile (or cache load) instead of one per eager op (~10).
        def inputs(seed):
            key_x, key_y = jax.random.split(jax.random.key(seed, impl="unsafe_rbg"))
            # NHWC, already in the compute dtype (torch autocast casts them inside the first layer)
            x = jax.random.normal(key_x, (step.batch_size, res, res, 3), jnp.float32).astype(dtype)
            return x, jax.random.randint(key_y, (step.batch_size,), 0, k)

        group = None
        if step.devices > 1:  # the batch sharded over a mesh, parameters replicated or sharded (mesh.py)
            from vitbench.backends.jax.mesh import Group

            group = Group(step.devices, step.parallelism, dev.platform)
        with jax.default_device(dev):
            # a group's batch is made sharded: never the whole global batch on one device first
            x, y = jax.jit(inputs, **({} if group is None else {"out_shardings": (group.batch, group.batch)}))(
                step.seed)
            jax.block_until_ready(x)  # dispatch is async: surface an allocation failure here
        shapes = cached_param_shapes(model, spec, res, k, dtype, dev.platform)
        params = random_params(model, res, step.seed, shapes)  # on the host: each device gets its own part
        params = jax.device_put(params, dev) if group is None else group.put_params(params)
        if step.mode == "infer":
            def forward(p, xb):
                return model.apply({"params": p}, xb)

            args: tuple = (params, x)
            jitted = jax.jit(forward) if group is None else jax.jit(forward, out_shardings=group.batch)
        else:
            opt = OptimConfig(optimizer=step.optimizer)
            tx = training.make_tx(opt, params)

            def loss_fn(p, xb, yb):
                logits = model.apply({"params": p}, xb, train=True)
                return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), yb).mean()

            def train_step(state, xb, yb):
                p, opt_state = state
                loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
                return training.apply_update(tx, grads, opt_state, p, opt.lr), loss

            # zeros like params, on params' device; jitted: one compile, not one per parameter shape (~10-30)
            state = (params, jax.jit(tx.init)(params))
            out_shardings = None
            if group is not None:  # optimizer state sharded as its parameter; the step keeps the layout
                state = group.put_params(state)
                out_shardings = (group.shardings(state), group.replicated)
            args = (state, x, y)
            # donate the state: XLA updates params and optimizer state in place (no second copy)
            jitted = jax.jit(train_step, donate_argnums=0, out_shardings=out_shardings)
        t0 = time.perf_counter()
        with jax.default_matmul_precision(MATMUL_PRECISION[step.precision]):  # read when tracing
            lowered = jitted.lower(*args)
        return lowered, args, spec, time.perf_counter() - t0

    def numerics_in_force(self) -> str | None:
        value = jax.config.jax_default_matmul_precision
        return (f"jax_default_matmul_precision={value}" if value else
                "jax_default_matmul_precision unset: the platform's default (fp32 on CPU, TF32 on NVIDIA GPUs, "
                "bf16 passes on TPU); vitbench traces every step under an explicit one")

    def attention_kernel(self, work: Workload) -> AttentionKernel | None:
        """From the compiled executable: a cuDNN fused-attention custom call, or XLA's own fusions."""
        if not isinstance(work, JaxWorkload):
            return None
        if not work.has_attention:
            return AttentionKernel.NONE
        try:
            text = work.executable.as_text()
        except Exception:  # noqa: BLE001 - some executables cannot print themselves
            return AttentionKernel.NOT_VISIBLE
        return AttentionKernel.CUDNN if "__cudnn$fmha" in text else AttentionKernel.XLA

    # -- memory --------------------------------------------------------------------------------------
    def _device_stats(self) -> dict | None:
        try:
            return self._dev().memory_stats()
        except Exception:  # noqa: BLE001 - not every platform implements it
            return None

    def reset_peak_memory(self) -> None:
        gc.collect()
        self._phase = {}
        self._state_mib = 0.0
        self._rss.reset()  # CPU; the device allocator's peak cannot be reset from JAX

    def restart_peak_memory(self, work: Workload | None = None) -> None:
        gc.collect()
        stats = self._device_stats()
        if stats and "peak_bytes_in_use" in stats:
            # + the planned temp of this phase's workload (XLA's scratch of one step)
            self._phase = {"peak": stats["peak_bytes_in_use"], "in_use": stats.get("bytes_in_use", 0),
                           "temp": getattr(work, "temp_bytes", None)}
        else:
            state = work.state_bytes() if work is not None else None
            self._state_mib = (state or 0) / 2**20
            self._rss.restart()

    def _planned(self) -> bool:
        """In a steady phase on an accelerator whose allocator peak did not move: the peak is XLA's plan."""
        stats = self._device_stats()
        return bool(self._phase) and bool(stats) and stats.get("peak_bytes_in_use", 0) <= self._phase["peak"]

    def memory_kind(self) -> MemoryKind:
        stats = self._device_stats()
        if not stats or "peak_bytes_in_use" not in stats:
            return MemoryKind.HOST_RSS
        return MemoryKind.XLA_PLANNED if self._planned() else MemoryKind.ALLOCATOR

    def peak_memory_mib(self) -> float:
        stats = self._device_stats()
        if stats and "peak_bytes_in_use" in stats:
            if self._planned():
                return (self._phase["in_use"] + (self._phase["temp"] or 0)) / 2**20
            return stats["peak_bytes_in_use"] / 2**20
        return self._state_mib + self._rss.growth_mib()

    def process_peak_mib(self) -> float:
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

    def matmul_workload(self, precision: str = "fp32", n: int = 2048) -> MatmulWorkload:
        """n x n @ n x n in the precision's dtype, compiled under the precision's matmul setting (as a step)."""
        dtype = compute_dtype(precision)
        dev = self._dev()
        self._refuse(precision=precision, device=dev.platform)
        ka, kb = jax.random.split(jax.random.PRNGKey(0))
        # committed to the trial's device (default_device alone leaves them uncommitted: the jit then compiled
        # for device 0 and copied both operands there on every call, so gpu:1's peak was gpu:0's)
        a = jax.device_put(jax.random.normal(ka, (n, n), jnp.float32).astype(dtype), dev)
        b = jax.device_put(jax.random.normal(kb, (n, n), jnp.float32).astype(dtype), dev)
        with jax.default_device(dev), jax.default_matmul_precision(MATMUL_PRECISION[precision]):
            lowered = jax.jit(jnp.matmul).lower(a, b)
        return Matmul(lowered.compile(), a, b, step_numerics(precision, lowered.as_text()))

    # -- transfer --------------------------------------------------------------------------------------
    def init_model(self, spec: ModelSpec, resolution: int, num_classes: int, seed: int) -> training.FlaxModel:
        from vitbench.models.flax import build_flax_model, init_params

        module = build_flax_model(spec, resolution, num_classes)
        return training.FlaxModel(module, self.put(init_params(module, resolution, seed)), spec)

    def weights(self, model: training.FlaxModel) -> dict[str, np.ndarray]:
        from vitbench.models.convert import flax_to_torch

        host = jax.tree_util.tree_map(np.array, jax.device_get(model.params))  # writable copies for torch
        return {k: v.numpy().copy() for k, v in flax_to_torch(host, model.spec).items()}

    def load_weights(self, model: training.FlaxModel, weights: dict[str, np.ndarray]) -> training.FlaxModel:
        from vitbench.models.convert import torch_to_flax

        model.params = self.put(torch_to_flax(weights, model.spec))
        return model

    def train(self, model: training.FlaxModel, data, resolution: int, opt: OptimConfig, batch_size: int,
              seed: int, distill=None) -> tuple[training.FlaxModel, list[float]]:
        return training.train(self, model, data, resolution, opt, batch_size, seed, distill)

    def train_masked_patch(self, model: training.FlaxModel, batches, opt: OptimConfig, mp, init: dict,
                           prefix: int) -> tuple[training.FlaxModel, dict, list[float]]:
        from vitbench.backends.jax import masked_patch

        return masked_patch.train(self, model, batches, opt, mp, init, prefix)

    def features(self, model: training.FlaxModel, x: np.ndarray) -> np.ndarray:
        return training.host_array(training.apply_compiled(model.module, True)(model.params, self.put(x)))

    def logits(self, model: training.FlaxModel, x: np.ndarray) -> np.ndarray:
        return training.host_array(training.apply_compiled(model.module, False)(model.params, self.put(x)))

    # -- inspection ---------------------------------------------------------------------------------------------
    def attention_maps(self, weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                       images: np.ndarray) -> np.ndarray:
        from vitbench.backends.jax.attention import attention_maps

        return attention_maps(weights, spec, resolution, images)
