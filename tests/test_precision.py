"""Matmul precision is a setting: what each backend sets for fp32 / tf32 / bf16, what it reads back, and that every
row records it; tf32 is refused where there is none."""

from __future__ import annotations

import pytest
import torch

from vitbench.backends.base import DeviceKind, Step, backend_spec
from vitbench.errors import ConfigError


@pytest.fixture
def torch_flags():
    """Put torch's global matmul flags back as they were."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def _torch_flags() -> tuple:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision())


def test_torch_fp32_is_full_fp32_for_matmuls_and_convolutions(torch_flags):
    from vitbench.backends.torch.numerics import set_matmul_precision

    torch.backends.cudnn.allow_tf32 = True  # torch's own default: TF32 cuDNN convolutions
    got = set_matmul_precision("fp32")
    assert _torch_flags() == (False, False, "highest")
    assert got["matmul_precision"] == "fp32" and got["autocast"] is None
    assert "cuda.matmul.allow_tf32=False" in got["framework"] and "cudnn.allow_tf32=False" in got["framework"]


def test_torch_tf32_sets_both_libraries(torch_flags):
    from vitbench.backends.torch.numerics import set_matmul_precision

    got = set_matmul_precision("tf32")
    assert _torch_flags() == (True, True, "high") and got["matmul_precision"] == "tf32"
    set_matmul_precision("fp32")  # and back: nothing sticks from a previous step
    assert _torch_flags() == (False, False, "highest")


def test_torch_steps_set_and_record_their_precision(torch_flags, one_torch_thread):
    from vitbench.backends.torch.backend import TorchBackend
    from vitbench.backends.torch.numerics import set_matmul_precision

    be = TorchBackend()
    be.setup("cpu")
    set_matmul_precision("tf32")  # left over from somewhere else in the process
    work = be.prepare(Step("ViT-Nano/4", batch_size=2))
    assert _torch_flags() == (False, False, "highest") and work.settings["matmul_precision"] == "fp32"
    work = be.prepare(Step("ViT-Nano/4", batch_size=2, precision="bf16"))
    assert work.settings["autocast"] == "bfloat16" and work.settings["matmul_precision"] == "fp32"
    assert work.step().dtype == torch.bfloat16  # the logits come out of autocast's bf16 matmul
    with pytest.raises(ConfigError, match="tf32"):
        be.prepare(Step("ViT-Nano/4", batch_size=2, precision="tf32"))  # no TF32 on a CPU


def _lowered_precisions(be, precision: str, model: str = "ViT-Nano/4") -> list[str]:
    from vitbench.backends.jax.numerics import lowered_precisions

    lowered, *_ = be.lower(Step(model, mode="train", batch_size=2, precision=precision))
    text = lowered.as_text()
    ops = [x for x in text.splitlines() if "stablehlo.dot_general" in x or "stablehlo.convolution" in x]
    if precision == "fp32":  # independently of the parser: every matmul and convolution says HIGHEST
        assert ops and all("HIGHEST" in x for x in ops)
    return lowered_precisions(text)


def test_jax_traces_every_dot_and_conv_under_the_precision():
    import jax

    from vitbench.backends.jax.backend import JaxBackend

    be = JaxBackend()
    be.setup("cpu")
    before = jax.config.jax_default_matmul_precision
    assert _lowered_precisions(be, "fp32") == ["HIGHEST"]  # every dot and convolution: fp32 passes
    assert _lowered_precisions(be, "fp32", "R-Nano") == ["HIGHEST"]  # convolutions too
    assert _lowered_precisions(be, "tf32", "R-Nano") == ["HIGH"]
    assert _lowered_precisions(be, "tf32") == ["HIGH"]  # TF32 on an NVIDIA GPU
    assert _lowered_precisions(be, "bf16") in ([], ["HIGHEST"])  # bf16 dots run in bf16; any f32 ones: fp32
    assert jax.config.jax_default_matmul_precision == before  # scoped to the trace, never left set globally


def test_jax_steps_record_their_precision_and_refuse_tf32_on_cpu():
    from vitbench.backends.jax.backend import JaxBackend

    be = JaxBackend()
    be.setup("cpu")
    work = be.prepare(Step("ViT-Nano/4", batch_size=2))
    assert work.settings["matmul_precision"] == "fp32" and work.settings["autocast"] is None
    assert "HIGHEST" in work.settings["framework"]
    work = be.prepare(Step("ViT-Nano/4", batch_size=2, precision="bf16"))
    assert work.settings["autocast"] == "bfloat16"
    with pytest.raises(ConfigError, match="tf32"):
        be.prepare(Step("ViT-Nano/4", batch_size=2, precision="tf32"))


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_tf32_is_a_precision_of_its_own_on_gpus_only(name):
    spec = backend_spec(name)
    assert "tf32" in spec.precisions
    assert any(f == "precision" for f, _ in spec.problems({"precision": "tf32", "device": "cpu"}))
    gpu = spec.device_string(DeviceKind.GPU)
    assert spec.problems({"precision": "tf32", "device": gpu}) == []


def test_bench_refuses_tf32_on_cpu_with_a_clear_message(cli):
    r = cli("bench", "ViT-Nano/4", "--precision", "tf32")
    assert r.exit_code == 2 and "tf32" in r.stderr and "CPU" in r.stderr and "Traceback" not in r.output


def test_the_transfer_primitives_compute_in_fp32_on_either_backend_whatever_was_set_before():
    """Accuracy (few-shot, fine-tuning, a train row's real-input part) is computed in TRANSFER_PRECISION, set
    explicitly: not the platform's default (TF32 for JAX's dots and torch's convolutions on an NVIDIA GPU), nor what
    a tf32 bench step left set in the same process."""
    import jax
    import jax.numpy as jnp
    import torch

    from vitbench.backends.base import TRANSFER_PRECISION, get_backend
    from vitbench.backends.jax import training
    from vitbench.backends.jax.numerics import lowered_precisions
    from vitbench.models.specs import get_spec
    from vitbench.transfer.schedules import OptimConfig

    assert TRANSFER_PRECISION == "fp32"
    tb, threads = get_backend("torch"), torch.get_num_threads()
    torch.backends.cudnn.allow_tf32 = True  # torch's own default: TF32 convolutions on a GPU
    torch.backends.cuda.matmul.allow_tf32 = True  # as a tf32 step leaves it
    try:
        tb.setup("cpu", threads=1)
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_num_threads(threads)

    jb = get_backend("jax")
    jb.setup("cpu")
    for name in ("ViT-Nano/4", "R-Nano"):
        model = jb.init_model(get_spec(name), 32, 3, seed=0)
        x, y = jnp.zeros((2, 32, 32, 3), jnp.float32), jnp.zeros((2,), jnp.int32)
        forward = training.apply_compiled(model.module, False).lower(model.params, x).as_text()
        tx, step = training._train_step(model.module, OptimConfig(steps=2, warmup_steps=0), 3, model.params)
        train = step.lower(model.params, tx.init(model.params), x, y, jnp.float32(0.1), ()).as_text()
        assert lowered_precisions(forward) == ["HIGHEST"] == lowered_precisions(train), name
    assert jax.config.jax_default_matmul_precision is None  # scoped to the trace
