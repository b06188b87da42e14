"""No silent wrong results (issue 24): a diverged training run is exit 1 and a 'diverged' row, never a checkpoint;
non-finite weights are neither written nor read; one checkpoint loader for every command (inspect included);
threads beyond the CPUs are capped with a warning and recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from records import job

from vitbench.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_vitbench_checkpoint(path, *, nan: bool = False, model: str = "ViT-Nano/4", classes: int = 5):
    """A random-init vitbench checkpoint written without save_checkpoint (which refuses NaN): what a run of an
    older vitbench, or a corrupted file, could leave."""
    from safetensors.numpy import save

    from vitbench.models.specs import get_spec
    from vitbench.models.torch import build_torch_model
    from vitbench.transfer.checkpoint import FORMAT

    spec = get_spec(model)
    weights = {k: v.detach().numpy().copy() for k, v in build_torch_model(spec, 32, classes).state_dict().items()}
    if nan:
        weights["blocks.0.attn.qkv.weight"][0, 0] = np.nan
    meta = {"format": FORMAT, "model": spec.name, "spec": spec.to_dict(), "resolution": 32, "num_classes": classes,
            "class_names": list(range(classes)), "backend": "torch", "key": "0" * 16, "config": None,
            "metrics": {}}
    path.write_bytes(save(weights, metadata={"vitbench": json.dumps(meta)}))
    return path


DIVERGING_LR = 0.5  # the learning rate whose runs diverge, under `diverging_training`


@pytest.fixture
def diverging_training(monkeypatch):
    """The torch backend's training, with the loss of every run at DIVERGING_LR non-finite from step 2 (what a
    too-large learning rate or temperature does, made deterministic and fast)."""
    from vitbench.backends.torch.backend import TorchBackend

    real = TorchBackend.train

    def train(self, model, data, resolution, opt, *args, **kwargs):
        model, losses = real(self, model, data, resolution, opt, *args, **kwargs)
        return model, losses[:1] + [float("nan")] * (len(losses) - 1) if opt.lr == DIVERGING_LR else losses

    monkeypatch.setattr(TorchBackend, "train", train)


def test_diverged_pretraining_exits_1_and_writes_nothing(cli, tmp_path, diverging_training):
    out = tmp_path / "d.safetensors"
    r = cli("pretrain", "ViT-Nano/4", "-r", "16", "--lr", DIVERGING_LR, "--steps", "3", "-b", "8", "--threads",
            "1", "-o", out)
    assert r.exit_code == 1, r.output
    assert "diverged: the loss is nan at step 2 of 3" in r.output and "Traceback" not in r.output, r.output
    assert not out.exists() and not out.with_suffix(".json").exists()


@pytest.fixture
def diverging_masked_patch(monkeypatch):
    """Masked-patch pre-training whose images are NaN from step 2 on: each backend's own loop computes a NaN loss
    there (what a too-large learning rate does, made deterministic and fast)."""
    import dataclasses

    from vitbench.transfer import masked_patch as mpt

    real = mpt.batches

    def batches(*args, **kwargs):
        for step, b in enumerate(real(*args, **kwargs)):
            yield b if step == 0 else dataclasses.replace(b, images=np.full_like(b.images, np.nan))

    monkeypatch.setattr(mpt, "batches", batches)


@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.jax)])
def test_diverged_masked_patch_pretraining_exits_1_and_writes_nothing(cli, tmp_path, diverging_masked_patch,
                                                                       backend):
    pytest.importorskip(backend)
    out = tmp_path / "d.safetensors"
    threads = ("--threads", "1") if backend == "torch" else ()  # JAX: the process's client, as its other tests
    r = cli("pretrain", "ViT-Nano/4", "-r", "16", "--objective", "masked_patch", "--steps", "3", "-b", "8",
            *threads, "--backend", backend, "-o", out)
    assert r.exit_code == 1, r.output
    assert "diverged: the loss is nan at step 2 of 3" in r.output and "Traceback" not in r.output, r.output
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_divergence_in_a_study_is_a_diverged_row_with_its_step(tmp_path, monkeypatch, diverging_training):
    from vitbench.record import Status
    from vitbench.trial import run_trial

    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path))
    rec = run_trial(job({"task": "pretrain", "model": "ViT-Nano/4", "pretrain_resolution": 16, "threads": 1,
                         "pretrain_lr": DIVERGING_LR, "pretrain_steps": 3, "pretrain_batch_size": 8}))
    assert rec.status is Status.DIVERGED and rec.status.done, rec
    assert rec.metrics["diverged_step"] == 2 and "diverged" in rec.error.message
    assert not list(tmp_path.glob("*.safetensors"))


def test_a_diverged_learning_rate_is_never_chosen(tmp_path, diverging_training):
    from vitbench.errors import TrainingDiverged
    from vitbench.protocols.finetune import FinetuneConfig, finetune

    ckpt = write_vitbench_checkpoint(tmp_path / "up.safetensors")
    cfg = {"checkpoint": str(ckpt), "resolution": 16, "steps": 3, "batch_size": 8, "warmup_steps": 0, "seeds": 1}
    rec = finetune(FinetuneConfig(**cfg, lr_grid=[0.01, DIVERGING_LR]), threads=1)
    assert rec.metrics["best_lr"] == 0.01 and rec.status == "ok"
    assert list(rec.raw["diverged_lrs"]) == [repr(DIVERGING_LR)]
    with pytest.raises(TrainingDiverged, match=r"at lr 0.5 diverged: the loss is nan at step 2"):
        finetune(FinetuneConfig(**cfg, lr_grid=[DIVERGING_LR]), threads=1)


def test_nonfinite_weights_are_never_written(tmp_path):
    from vitbench.transfer.checkpoint import save_checkpoint

    with pytest.raises(ConfigError, match="NaN or infinite"):
        save_checkpoint(tmp_path / "x.safetensors", {"w": np.array([1.0, np.inf], np.float32)},
                        {"model": "ViT-Nano/4"})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["fewshot", "--shots", "1", "--seeds", "1", "--l2-reg", "1", "-c"],
                                     ["finetune", "--steps", "2", "--warmup-steps", "0", "--lr-grid", "0.01", "--seeds", "1", "-c"],
                                     ["inspect", "-n", "1"]])
def test_every_loader_refuses_nan_weights(cli, tmp_path, command):
    ckpt = write_vitbench_checkpoint(tmp_path / "nan.safetensors", nan=True)
    r = cli(*command, ckpt)
    assert r.exit_code == 2 and "NaN or infinite" in r.output and "blocks.0.attn.qkv.weight" in r.output, r.output


@pytest.fixture(scope="module")
def timm_files(tmp_path_factory):
    """A plain timm VisionTransformer's state dict (random weights), saved with safetensors in fp32, bf16, fp16."""
    import torch
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    sd = VisionTransformer(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2).state_dict()
    d = tmp_path_factory.mktemp("timm")
    files = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        files[name] = d / f"nano_timm_{name}.safetensors"
        save_file({k: v.to(dtype).contiguous() for k, v in sd.items()}, str(files[name]))
    return files


@pytest.mark.parametrize("backend,dtype", [("torch", "fp32"), ("torch", "bf16"), ("torch", "fp16"),
                                           ("jax", "bf16")])  # one loader: the dtype is gone before a backend
def test_inspect_reads_a_timm_state_dict_as_fewshot_does(cli, timm_files, dtype, backend):
    r = cli("inspect", timm_files[dtype], "--backend", backend, "-n", "2", "--rollout", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["model"] == "ViT-Nano/4" and doc["trained_resolution_px"] == 32
    assert np.isfinite(doc["attention_distance_px"]).all()


def test_fewshot_reads_the_same_timm_file(cli, timm_files):
    r = cli("fewshot", "-c", timm_files["bf16"], "--shots", "1", "--seeds", "1", "--l2-reg", "1", "--threads", "1",
            "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["model"] == "ViT-Nano/4"


def test_threads_beyond_the_cpus_are_capped_with_a_warning_and_recorded():
    """In a subprocess: 100,000 OpenMP threads crashed the process (the os-level failure is the point)."""
    code = ("from vitbench.cli import app; app(['env', '--threads', '100000', '--json'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "VITBENCH_PEAK_POLICY": '{"cpu_sizes": [64], "seconds": 0.02}'})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "warning: threads 100000" in r.stderr and "capped" in r.stderr
    env = json.loads(r.stdout)["env"]
    assert env["threads_requested"] == 100000 and 1 <= env["threads"] <= os.cpu_count()
