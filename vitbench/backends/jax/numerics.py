"""What the JAX backend computes each precision in: the dtype, the matmul setting a step is traced under, and
the precision of every float32 dot and convolution read back from the lowered step's StableHLO (recorded with
every step; see backend.py's docstring)."""

from __future__ import annotations

import re

import jax.numpy as jnp

from vitbench.errors import ConfigError

DTYPES = {"fp32": jnp.float32, "tf32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
# The `jax_default_matmul_precision` each precision traces its step under (JAX docs, jax.default_matmul_precision:
# "highest"/"float32" = fp32, "tensorfloat32" = TF32); mixed precision keeps its fp32 dots at full precision.
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "highest", "fp16": "highest"}
# dot_general: `precision = [HIGHEST, HIGHEST]`;
# convolution: `precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]`
_PRECISION_ATTR = re.compile(r"precision(?:_config)? = \[(?:#stablehlo<precision )?(\w+)>?, "
                             r"(?:#stablehlo<precision )?(\w+)>?\]")
_OPERAND_TYPE = re.compile(r"tensor<(?:[\d?]+x)*(\w+)>")  # the element type of a StableHLO tensor type


def traced_at(precision: str):
    """Decorator: the function's body traced under `precision`'s matmul setting, wherever it is jitted and called
    (the transfer primitives: Backend's TRANSFER_PRECISION, not the platform's default, TF32 on NVIDIA GPUs). The
    setting is scoped to the trace, never left set globally."""
    import functools

    import jax

    def wrap(fn):
        @functools.wraps(fn)
        def traced(*args, **kwargs):
            with jax.default_matmul_precision(MATMUL_PRECISION[precision]):
                return fn(*args, **kwargs)
        return traced
    return wrap


def compute_dtype(precision: str):
    """The array dtype a step of `precision` computes in (ConfigError naming the allowed ones)."""
    if precision not in DTYPES:
        raise ConfigError(f"unknown precision {precision!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[precision]


def lowered_precisions(text: str) -> list[str]:
    """The distinct precision configs of the float32 dots and convolutions in a lowered module's StableHLO text
    (the config only matters for float32 operands: bf16/fp16 dots run in their own type whatever it says)."""
    found = set()
    for line in text.splitlines():
        m = _PRECISION_ATTR.search(line)
        if not m:
            continue
        operands = line.rsplit(": (", 1)[-1].split(") ->", 1)[0]
        if [t for t in _OPERAND_TYPE.findall(operands)] == ["f32", "f32"]:
            a, b = m.groups()
            found.add(a if a == b else f"{a},{b}")
    return sorted(found)


def step_numerics(precision: str, lowered_text: str) -> dict:
    """What a step of `precision` computes its float32 matmuls in, from what its lowered module says (from the
    setting it was traced under when it has none), and its mixed-precision compute dtype."""
    found = lowered_precisions(lowered_text)
    # HIGHEST = fp32 passes; HIGH = TF32 on NVIDIA GPUs (bf16_3x on TPU); DEFAULT = the platform's fastest
    names = {("HIGHEST",): "fp32", ("HIGH",): "tf32"}
    setting = MATMUL_PRECISION[precision]
    math = names.get(tuple(found), "mixed") if found else ("fp32" if setting == "highest" else "tf32")
    autocast = None if precision in ("fp32", "tf32") else str(jnp.dtype(DTYPES[precision]))
    return {"matmul_precision": math, "autocast": autocast,
            "framework": f"jax_default_matmul_precision={setting} lowered f32 dot/conv precision="
                         f"{'/'.join(found) or 'none'} dtype={autocast or 'float32'}"}
