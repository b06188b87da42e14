"""Pre-training, checkpoints, position-embedding resampling and fine-tuning on tiny models (torch)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from vitbench.backends.base import get_backend
from vitbench.errors import ConfigError, UnsafeFileError
from vitbench.models.analytic import train_flops_per_image
from vitbench.models.posemb_resize import resample_pos_embed
from vitbench.models.specs import get_spec
from vitbench.transfer import ops
from vitbench.transfer.checkpoint import load_checkpoint, save_checkpoint
from vitbench.protocols.finetune import FinetuneConfig, finetune
from vitbench.protocols.pretrain import PretrainConfig, ensure_upstream, pretrain
from tolerances_fp import resample_bound
from tolerances_stat import gamma

# ViT-Nano/4 at 16 px (16 tokens) keeps every run here to a second or two.
UP = PretrainConfig(model="ViT-Nano/4", resolution=16, steps=80, warmup_steps=8, batch_size=32, lr=3e-3)


pytestmark = pytest.mark.usefixtures("one_torch_thread")

def test_pos_embed_resampling_identity_shapes_and_class_token():
    rng = np.random.default_rng(0)
    pe = rng.normal(size=(1, 1 + 16, 8)).astype(np.float32)
    assert resample_pos_embed(pe, 4) is pe  # same grid: untouched
    up = resample_pos_embed(pe, 6)
    assert up.shape == (1, 37, 8) and up.dtype == pe.dtype
    np.testing.assert_array_equal(up[:, 0], pe[:, 0])  # class token kept as is
    grid = torch.tensor(pe[0, 1:].reshape(1, 4, 4, 8)).permute(0, 3, 1, 2)  # 2-D bilinear on the 4x4 grid
    ref = torch.nn.functional.interpolate(grid, size=(6, 6), mode="bilinear", align_corners=False)
    np.testing.assert_allclose(up[0, 1:], ref[0].permute(1, 2, 0).reshape(36, 8).numpy(),
                               rtol=0, atol=resample_bound(pe, 4))  # numpy vs torch: one fp32 resampling, 4 x 4
    with pytest.raises(ValueError, match="square"):
        resample_pos_embed(pe[:, :-1], 6)


def test_from_weights_zero_head_and_interpolated_pos_embed():
    eng = get_backend("torch")
    spec = get_spec("ViT-Nano/4")
    src = eng.weights(eng.init_model(spec, 16, 5, seed=1))
    model = ops.from_weights(eng, spec, src, 24, 3, seed=0)  # 4x4 -> 6x6 grid, 5 -> 3 classes
    w = eng.weights(model)
    assert w["pos_embed"].shape == (1, 37, 32) and w["head.weight"].shape == (3, 32)
    assert not w["head.weight"].any() and not w["head.bias"].any()
    np.testing.assert_array_equal(w["blocks.0.attn.qkv.weight"], src["blocks.0.attn.qkv.weight"])
    np.testing.assert_array_equal(w["pos_embed"], resample_pos_embed(src["pos_embed"], 6))  # the same resampler
    x = np.zeros((2, 24, 24, 3), np.float32)
    assert np.all(eng.logits(model, x) == 0)  # a zero head outputs zeros
    with pytest.raises(ConfigError, match="does not match"):
        ops.from_weights(eng, get_spec("ViT-Micro/4"), src, 16, 3, seed=0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("upstream-cache")


@pytest.fixture(scope="module")
def upstream(cache):
    """One upstream for the module, trained once into `cache` (its record kept), reused by later tests."""
    ckpt, rec = ensure_upstream(UP, directory=cache)
    assert rec is not None  # an empty cache: trained now
    return ckpt, rec


def test_pretrain_records_compute_and_checkpoint_roundtrip(upstream):
    ckpt, rec = upstream
    m = rec.metrics
    assert rec.kind == "pretrain" and rec.status == "ok"
    assert m["images_seen"] == 80 * 32
    expect = train_flops_per_image(get_spec("ViT-Nano/4"), 16, 5) * 80 * 32 / 1e18
    # exact: flops x 80 x 32 and flops x 2560 are the same float64 (integers below 2^53, and x 32 is a power of
    # two), then the same / 1e18
    assert m["exaflops"] == expect
    assert rec.raw["loss"][-1] < rec.raw["loss"][0]
    assert m["accuracy"] > 0.4  # 5 classes: chance ~0.2
    path = ckpt.path
    assert path.is_file() and path.with_suffix(".json").is_file()
    back = load_checkpoint(path)
    assert back.model == "ViT-Nano/4" and back.resolution == 16 and back.num_classes == 5
    assert back.meta["config"]["steps"] == 80 and back.meta["spec"]["width"] == 32
    for k, v in ckpt.weights.items():
        np.testing.assert_array_equal(back.weights[k], v)


def test_a_bf16_timm_state_dict_loads_as_a_checkpoint(tmp_path):
    """A foreign file goes to its own reader on the header alone: bf16 tensors (which numpy cannot read) load."""
    from safetensors.torch import save_file

    from vitbench.models.torch import build_torch_model

    sd = build_torch_model(get_spec("ViT-Nano/4")).state_dict()
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}
    save_file(sd, str(tmp_path / "timm.safetensors"))
    ckpt = load_checkpoint(tmp_path / "timm.safetensors")
    assert ckpt.model == "ViT-Nano/4" and ckpt.meta["metrics"] == {}
    for k, v in ckpt.weights.items():  # head dropped, the rest bf16 values as float32
        np.testing.assert_array_equal(v, sd[k].float().numpy())
    assert not any(k.startswith("head.") for k in ckpt.weights)
    (tmp_path / "W.PTH").write_bytes(b"whatever")  # pickle suffixes in any case
    with pytest.raises(UnsafeFileError, match="pickle-based"):
        load_checkpoint(tmp_path / "W.PTH")


def test_checkpoint_refuses_pickles_and_foreign_files(tmp_path):
    (tmp_path / "w.pt").write_bytes(b"whatever")
    with pytest.raises(UnsafeFileError, match="pickle-based"):
        load_checkpoint(tmp_path / "w.pt")
    with pytest.raises(ConfigError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.safetensors")
    from safetensors.numpy import save_file

    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ConfigError, match="fit no model in the table"):  # read as a timm state dict: no match
        load_checkpoint(tmp_path / "plain.safetensors")
    rec, ckpt = pretrain(PretrainConfig(model="R-Nano", steps=2, warmup_steps=0, batch_size=4),
                         out=tmp_path / "explicit")  # explicit output path, another family
    assert rec.config["checkpoint"] == str(tmp_path / "explicit.safetensors")
    assert load_checkpoint(tmp_path / "explicit.safetensors").model == "R-Nano"
    back = load_checkpoint(tmp_path / "explicit.safetensors")
    assert all(w.dtype == np.float32 for w in back.weights.values())
    # metadata that names one model while the weights are another's: a clear error, not a KeyError
    p = save_checkpoint(tmp_path / "ok", {"a": np.ones(3)}, {"model": "ViT-Nano/4", "resolution": 16,
                                                              "num_classes": 2})
    assert p.suffix == ".safetensors"
    with pytest.raises(ConfigError, match=r"the weights do not fit ViT-Nano/4: missing \[cls_token"):
        load_checkpoint(p)


def test_upstream_cache_trains_once(cache, upstream):
    again, rec2 = ensure_upstream(UP, directory=cache)
    assert rec2 is None and again.meta["key"] == UP.key() and again.path.parent == cache
    assert UP.key() != UP.model_copy(update={"steps": 81}).key()
    assert UP.key() == PretrainConfig(model="vit-nano_4", resolution=16, steps=80, warmup_steps=8,
                                      batch_size=32, lr=3e-3).key()  # alias -> same upstream


def test_a_damaged_cache_file_says_to_delete_it(tmp_path):
    """A cached upstream cut short (a full disk, a copy stopped) was refused naming only the file: it is vitbench's
    own cache, so the message says what to do (delete it: the next run trains it again); it is not deleted."""
    from vitbench.errors import ConfigError
    from vitbench.protocols.pretrain import cache_path

    path = cache_path(UP, tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\"")
    with pytest.raises(ConfigError, match=f"{re.escape(str(path))}.*the checkpoint cache's file of this "
                                          "pre-training: delete it, and the next run trains it again"):
        ensure_upstream(UP, directory=tmp_path)
    assert path.is_file()


def test_another_pre_trainings_file_under_this_ones_name_is_refused(cache, upstream, tmp_path):
    """A cached file copied under another config's name was trusted: its numbers (images_seen 48 for a --steps 4
    run of batch 16) were reported for that config. Its header's key must be the name's; refused saying to delete
    it, nothing deleted."""
    import shutil

    from vitbench.errors import ConfigError
    from vitbench.protocols.pretrain import cache_path

    other = UP.model_copy(update={"steps": 81})
    shutil.copy(cache_path(UP, cache), tmp_path / "x.safetensors")
    target = cache_path(other, tmp_path)
    shutil.copy(cache_path(UP, cache), target)
    with pytest.raises(ConfigError, match=f"holds another one \\(its key '{UP.key()}', not '{other.key()}'\\): "
                                          "delete it"):
        ensure_upstream(other, directory=tmp_path)
    assert target.is_file()


def test_a_relative_data_path_is_the_folder_it_names_from_where_it_was_typed(tmp_path, monkeypatch):
    """`pretrain --data folder --data-path ds` in two folders reused the first folder's cached upstream: the key
    held the path as typed. A relative path counts as the absolute one it names; an absolute one as before."""
    cfg = PretrainConfig(model="ViT-Nano/4", data={"name": "folder", "path": "ds"})
    keys = []
    for where in ("a", "b"):
        (tmp_path / where).mkdir()
        monkeypatch.chdir(tmp_path / where)
        keys.append(cfg.key())
    assert keys[0] != keys[1]
    absolute = {"name": "folder", "path": str(tmp_path / "b" / "ds")}
    assert keys[1] == PretrainConfig(model="ViT-Nano/4", data=absolute).key()


def test_finetune_beats_the_initial_head(cache, upstream):
    cfg = FinetuneConfig(upstream=UP, steps=60, warmup_steps=5, batch_size=32, lr_grid=[0.03, 0.1],
                         resolution=24, seeds=1)  # higher resolution: interpolated position embeddings
    rec = finetune(cfg, cache=str(cache))
    m = rec.metrics
    assert rec.kind == "finetune" and rec.config["resolution"] == 24
    assert m["best_lr"] in (0.03, 0.1) and set(rec.raw["val_accuracy_by_lr"]) == {"0.03", "0.1"}
    assert m["initial_accuracy"] < 0.3  # zero head: every logit ties
    assert m["accuracy"] > m["initial_accuracy"] + 0.25
    assert m["finetune_images_seen"] == 3 * 60 * 32  # two LRs + the refit on train+val
    # the upstream's stored number, carried (JSON reads a float64 back exactly)
    assert m["exaflops"] == load_checkpoint(rec.config["upstream_checkpoint"]).meta["metrics"]["exaflops"]


def test_finetune_needs_val_split_for_a_grid(tmp_path):  # checked before any pre-training
    cfg = FinetuneConfig(upstream=UP, steps=5, warmup_steps=1, batch_size=8, lr_grid=[0.01, 0.03],
                         data={"classes": "5-9", "val_fraction": 0.0})
    with pytest.raises(ConfigError, match="held-out split"):
        finetune(cfg, cache=str(tmp_path))


def test_finetune_seeds_give_mean_spread_and_per_seed_values(cache, upstream):
    cfg = FinetuneConfig(upstream=UP, steps=20, warmup_steps=2, batch_size=16, lr_grid=[0.03], seeds=2, seed=5)
    rec = finetune(cfg, cache=str(cache))
    m, raw = rec.metrics, rec.raw
    per_seed = raw["per_seed"]["accuracy"]
    assert raw["per_seed"]["seed"] == [5, 6] and len(per_seed) == 2 and len(raw["loss"]) == 2
    # exact: vitbench's spread() makes the same numpy mean and std (ddof 1) of the same values
    assert m["accuracy"] == np.mean(per_seed)
    assert m["accuracy_std"] == np.std(per_seed, ddof=1)
    assert raw["loss"][0] != raw["loss"][1]  # the seed sets the batch order: two different runs
    assert m["finetune_images_seen"] == 2 * 20 * 16  # one LR: no selection runs, one refit per seed
    assert m["selection_accuracy"] is None and m["val_accuracy"] is None


class _ScriptedEngine:
    """Stands in for a transfer backend (and the protocol's model operations on it): a 'model' is (lr, seed,
    data size); accuracies come from a table.

    Lets the protocol's bookkeeping be checked exactly: which runs it makes, how it picks the LR, what it reports.
    """

    compile_s = 0.0

    def __init__(self, val, test):
        self.val, self.test, self.runs = val, test, []

    def setup(self, device, threads):
        return {"backend": "torch"}

    def weights(self, model):  # a scripted 'model' has no tensors: nothing to find non-finite
        return {}

    def from_weights(self, spec, weights, resolution, num_classes, seed):
        return None

    def train(self, model, data, resolution, opt, batch_size, seed):
        self.runs.append((opt.lr, seed, len(data)))
        return (opt.lr, seed, len(data)), [1.6, 1.0]

    def accuracy(self, model, data, resolution):
        if model is None:
            return 0.2  # the zero head
        table = self.val if len(data) < 100 else self.test  # digits 5-9: val 68 images, test 225
        return table[model[:2]] if model[:2] in table else table[model]


def test_finetune_picks_the_lr_by_mean_val_accuracy_over_seeds(cache, upstream, monkeypatch):
    from vitbench.backends import base
    from vitbench.transfer import ops

    # LR 0.1 has the single best val run (seed 0: 0.95) but fails on the other seeds; LR 0.03 is steady.
    val = {(0.03, 0): 0.80, (0.03, 1): 0.80, (0.03, 2): 0.80, (0.1, 0): 0.95, (0.1, 1): 0.30, (0.1, 2): 0.30}
    n_train = 603
    test = {(0.03, 0, n_train): 0.82, (0.03, 1, n_train): 0.84, (0.03, 2, n_train): 0.86,  # selection runs
            (0.1, 0, n_train): 0.9, (0.1, 1, n_train): 0.3, (0.1, 2, n_train): 0.3,
            (0.03, 0, n_train + 68): 0.90, (0.03, 1, n_train + 68): 0.40, (0.03, 2, n_train + 68): 0.92}  # refit
    eng = _ScriptedEngine(val, test)
    monkeypatch.setattr(base, "transfer_backend", lambda name: eng)
    monkeypatch.setattr(ops, "from_weights", lambda be, *args, **kw: be.from_weights(*args, **kw))
    monkeypatch.setattr(ops, "accuracy", lambda be, model, data, res, *args: be.accuracy(model, data, res))
    rec = finetune(FinetuneConfig(upstream=UP, steps=2, warmup_steps=1, batch_size=4, lr_grid=[0.1, 0.03],
                                  seeds=3), cache=str(cache))
    m, raw = rec.metrics, rec.raw
    assert m["best_lr"] == 0.03  # mean 0.80 beats mean 0.52, although 0.1 had the best single run
    # float64 means of 3 literals against a literal: the literals (3), the sum (2), / 3 (1); the reference's
    # literal and division (2)
    mean3 = gamma(3 + 2 + 1 + 2)
    assert raw["val_accuracy_by_lr"] == {"0.03": pytest.approx(0.8, rel=mean3),
                                         "0.1": pytest.approx(1.55 / 3, rel=mean3)}
    # 2 LRs x 3 seeds on train, then 3 refits on train + val at the chosen LR
    assert eng.runs == [(0.03, s, n_train) for s in range(3)] + [(0.1, s, n_train) for s in range(3)] \
        + [(0.03, s, n_train + 68) for s in range(3)]
    assert m["finetune_images_seen"] == 9 * 2 * 4
    assert raw["per_seed"]["accuracy"] == [0.90, 0.40, 0.92]  # the failed refit of seed 1 is visible ...
    assert m["accuracy"] == pytest.approx(2.22 / 3, rel=mean3)
    assert m["accuracy_std"] == np.std([0.9, 0.4, 0.92], ddof=1)  # the same numpy std of the same values: exact
    # ... against the selection runs at the same LR
    assert m["selection_accuracy"] == pytest.approx(0.84, rel=mean3)
    assert m["val_accuracy"] == pytest.approx(0.80, rel=mean3)
