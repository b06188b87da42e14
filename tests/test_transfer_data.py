"""Datasets for transfer: loaders on files written here, restricted unpickling, splits, preprocessing."""

from __future__ import annotations

import math
import os
import pickle

import numpy as np
import pytest
import torch

from vitbench.errors import ConfigError, UnsafeFileError
from vitbench.transfer.config import DataConfig
from vitbench.transfer.data import batch_indices, load_splits
from vitbench.transfer.preprocess import preprocess, resize_weights
from vitbench.transfer.safe_pickle import safe_load
from vitbench.transfer.schedules import OptimConfig, lr_table
from tolerances_fp import EPS32
from tolerances_stat import gamma


# ---------------------------------------------------------------------------------------------
# digits, splits, class subsets
# ---------------------------------------------------------------------------------------------
def test_digits_disjoint_class_halves_are_deterministic_and_stratified():
    up = load_splits({"classes": "0-4"})
    down = load_splits({"classes": [5, 6, 7, 8, 9]})
    again = load_splits({"classes": "0-4"})
    assert up.num_classes == down.num_classes == 5
    assert np.array_equal(up.train.labels, again.train.labels)
    assert np.array_equal(up.train.images, again.train.images)
    # relabelled 0..4, every class in every split, test ~25 %, val ~10 % of the rest
    for s in (up.train, up.val, up.test, down.train):
        assert set(np.unique(s.labels)) == set(range(5))
    n = len(up.train) + len(up.val) + len(up.test)
    # stratified_split holds out round(fraction x n_c) of each of the 5 classes: off by <= 0.5 image per class
    assert abs(len(up.test) - 0.25 * n) <= 0.5 * 5 and abs(len(up.val) - 0.1 * (n - len(up.test))) <= 0.5 * 5
    # the halves hold different images: no upstream image equals a downstream one
    a = up.train.images.reshape(len(up.train), -1)
    b = down.test.images.reshape(len(down.test), -1)
    assert not (a[:, None, :] == b[None, :, :]).all(-1).any()
    # another seed gives another split
    other = load_splits({"classes": "0-4", "seed": 1})
    assert not np.array_equal(other.test.images, up.test.images)


def test_a_class_held_out_images_depend_on_the_seed_alone():
    """An upstream of every digit and a downstream of digits 5-9 (or of 0-4 in another order) hold out the same
    images of each class they share: the upstream never trains on the downstream's test images. One generator
    walked the chosen classes in turn, so an upstream of every digit trained on 168 of the downstream's 225 test
    images, and its 5-shot accuracy on them read 0.975 against 0.867 on the others (found by a review)."""
    every = load_splits({"classes": None})
    for classes in ([5, 6, 7, 8, 9], [4, 3, 2, 1, 0], [2, 3, 4, 5, 6]):
        down = load_splits({"classes": classes})
        assert not set(every.train.index) & set(down.test.index), classes
        assert not set(every.val.index) & set(down.test.index), classes
        for c, src in enumerate(classes):  # and each shared class's test images are the same images
            assert set(down.test.index[down.test.labels == c]) == set(every.test.index[every.test.labels == src])
    capped = [load_splits({"classes": cl, "train_per_class": 5}) for cl in ([0, 1], [1, 0])]
    assert set(capped[0].train.index) == set(capped[1].train.index)  # the cap picks the same images too


def test_train_per_class_caps_and_bad_classes_are_config_errors():
    s = load_splits({"classes": "0-2", "train_per_class": 7})
    assert s.train.per_class_counts() == [7, 7, 7]
    with pytest.raises(ConfigError, match=r"out of range.*0\.\.9"):
        load_splits({"classes": [3, 12]})


def test_preprocess_matches_antialiased_bilinear_and_scales_to_pm1():
    x = np.random.default_rng(0).uniform(0, 1, (2, 13, 17, 3)).astype(np.float32)
    for r in (5, 16, 40):
        ours = (preprocess(x, r) + 1) / 2
        ref = torch.nn.functional.interpolate(torch.tensor(x).permute(0, 3, 1, 2), size=(r, r), mode="bilinear",
                                              antialias=True, align_corners=False).permute(0, 2, 3, 1).numpy()
        # per axis an antialiased bilinear sum over 2 ceil(in / r) + 1 taps of positive weights summing to 1, each
        # weight itself rounded: 2 x taps roundings of max|x| = 1 per axis, + 2 for the scaling to [-1, 1] and back
        taps = 2 * math.ceil(max(x.shape[1:3]) / r) + 1
        np.testing.assert_allclose(ours, ref, rtol=0, atol=(2 * 2 * taps + 2) * EPS32)
    u8 = np.array([[[[0], [255]], [[255], [0]]]], np.uint8)  # grey -> 3 channels, 0 -> -1, 255 -> +1
    out = preprocess(u8, 2)
    assert out.shape == (1, 2, 2, 3) and out.dtype == np.float32
    assert out.min() == -1.0 and out.max() == 1.0
    # exact: equal sizes put weight 1 - 0 / 1 on each pixel's own centre and 1 - 1 / 1 = 0 on its neighbours
    np.testing.assert_array_equal(resize_weights(7, 7), np.eye(7))


def test_batch_indices_are_epochs_of_permutations():
    idx = batch_indices(10, 4, 5, seed=3)
    assert idx.shape == (5, 4)
    flat = idx.reshape(-1)
    assert sorted(flat[:10]) == list(range(10))  # the first epoch is a permutation
    assert np.array_equal(idx, batch_indices(10, 4, 5, seed=3))


def test_lr_schedule_warmup_then_decay():
    cos = lr_table(OptimConfig(lr=0.1, steps=100, warmup_steps=10, decay="cosine"))
    # float64: step 0 is lr x (1 + cos 0) / 2 (exact) x 1 / 10 (2 roundings), against the literal 0.01 (1) from the
    # literal 0.1 (1); step 9 ends the warm-up: 0.1 x 1.0 x 1.0, exact
    assert cos[0] == pytest.approx(0.01, rel=gamma(4)) and cos[9] == 0.1
    assert np.all(np.diff(cos[:10]) > 0) and np.all(np.diff(cos[10:]) <= 0) and cos[-1] < 1e-3
    lin = lr_table(OptimConfig(lr=0.1, steps=100, warmup_steps=0, decay="linear"))
    # linear_end + (lr - linear_end) x 1: 2 roundings; each LR rounds <= 5 times (step / n, 1 - it, the product,
    # + end) a value <= lr, so two LRs' difference is off by <= 2 gamma(5) lr from the true, constant step
    assert lin[0] == pytest.approx(0.1, rel=gamma(2))
    assert np.allclose(np.diff(lin), np.diff(lin)[0], rtol=0, atol=2 * gamma(5) * 0.1)
    with pytest.raises(ValueError, match="warmup_steps"):
        OptimConfig(steps=5, warmup_steps=5)


# ---------------------------------------------------------------------------------------------
# image folders
# ---------------------------------------------------------------------------------------------
def _write_png(path, value, size=(6, 5)):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.full((size[1], size[0], 3), value, np.uint8)
    Image.fromarray(arr).save(path)


def test_image_folder_flat_and_train_test_layouts(tmp_path):
    root = tmp_path / "flat"
    for c, v in (("cat", 10), ("dog", 200)):
        for i in range(8):
            _write_png(root / c / f"{i}.png", v + i)
    (root / "cat" / "notes.txt").write_text("ignored")
    s = load_splits({"name": "folder", "path": str(root), "test_fraction": 0.25})
    assert s.train.class_names == ["cat", "dog"] and s.num_classes == 2
    assert len(s.train) + len(s.val) + len(s.test) == 16
    assert not s.train.pool.resident  # listed, decoded on demand
    images = np.stack([s.train.pool.decode(i) for i in s.train.index])
    assert images.shape[1:] == (5, 6, 3) and images.dtype == np.uint8
    # the label follows the folder: cats are dark, dogs bright
    assert np.all((images.mean((1, 2, 3)) > 100) == (s.train.labels == 1))

    split = tmp_path / "split"
    for part, n in (("train", 6), ("test", 3)):
        for c, v in (("a", 0), ("b", 255)):
            for i in range(n):
                _write_png(split / part / c / f"{i}.jpg", v, size=(8, 8) if i else (4, 4))  # mixed sizes
    s = load_splits({"name": "folder", "path": str(split)})
    assert len(s.test) == 6 and len(s.train) + len(s.val) == 12
    sizes = {s.train.pool.decode(i).shape for i in s.train.index}
    assert sizes == {(8, 8, 3), (4, 4, 3)}  # stored sizes kept: each image is resized once, to the resolution
    x, y = s.train.batch(np.arange(len(s.train)), 8)
    assert x.shape == (len(s.train), 8, 8, 3) and np.all((x.mean((1, 2, 3)) > 0) == (y == 1))


def test_image_folder_errors_name_path_and_layout(tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist.*root/<class>"):
        load_splits({"name": "folder", "path": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="data.path is required"):
        load_splits({"name": "folder"})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no class sub-directories"):
        load_splits({"name": "folder", "path": str(tmp_path / "empty")})
    (tmp_path / "bad" / "x").mkdir(parents=True)
    (tmp_path / "bad" / "x" / "a.png").write_bytes(b"not a png")
    _write_png(tmp_path / "bad" / "x" / "b.png", 3)
    (tmp_path / "bad" / "y").mkdir()  # a second class: one class alone is refused (a classifier needs two)
    _write_png(tmp_path / "bad" / "y" / "c.png", 3)
    s = load_splits({"name": "folder", "path": str(tmp_path / "bad"), "test_fraction": 0.5})  # listed: no decode
    with pytest.raises(ConfigError, match=r"a\.png: cannot be read as an image"):  # named when decoded
        for part in (s.train, s.test):
            part.batch(np.arange(len(part)), 4)


# ---------------------------------------------------------------------------------------------
# CIFAR python layout (restricted unpickler)
# ---------------------------------------------------------------------------------------------
def _cifar_images(n, seed):
    return np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)


def _dump(path, obj, protocol=2):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def test_cifar10_layout_loads_with_channel_order(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for i in range(1, 6):
        _dump(root / f"data_batch_{i}", {b"batch_label": b"training batch", b"labels": [j % 10 for j in range(20)],
                                         b"data": _cifar_images(20, i), b"filenames": [b"f.png"] * 20},
              protocol=2 if i % 2 else 4)
    test = _cifar_images(10, 9)
    _dump(root / "test_batch", {b"labels": list(range(10)), b"data": test}, protocol=5)
    _dump(root / "batches.meta", {b"label_names": [f"n{i}".encode() for i in range(10)]})
    s = load_splits({"name": "cifar10", "path": str(tmp_path), "val_fraction": 0.1})  # parent dir works too
    assert len(s.test) == 10 and len(s.train) + len(s.val) == 100
    assert s.train.class_names[3] == "n3" and s.train.images.shape[1:] == (32, 32, 3)
    # CIFAR rows are R plane, G plane, B plane (1024 each): pixel (0, 1) of image 0 is data[1], [1025], [2049]
    order = np.argsort(s.test.labels, kind="stable")
    img0 = s.test.images[order][0]
    assert tuple(img0[0, 1]) == (test[0, 1], test[0, 1025], test[0, 2049])


def test_cifar100_layout_and_missing_files(tmp_path):
    root = tmp_path / "c100"
    root.mkdir()
    _dump(root / "train", {b"fine_labels": [i % 100 for i in range(200)], b"coarse_labels": [0] * 200,
                           b"data": _cifar_images(200, 1)})
    _dump(root / "test", {b"fine_labels": list(range(100)), b"data": _cifar_images(100, 2)})
    s = load_splits({"name": "cifar100", "path": str(root), "classes": "0-9"})
    assert s.num_classes == 10 and len(s.test) == 10
    with pytest.raises(ConfigError, match=r"missing data_batch_1.*CIFAR-10 python layout"):
        load_splits({"name": "cifar10", "path": str(root)})


class _Evil:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_malicious_pickle_is_refused_without_running(tmp_path):
    target = tmp_path / "pwned"
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    _dump(root / "data_batch_1", {b"data": _cifar_images(2, 0), b"labels": [0, 1], b"x": _Evil(str(target))})
    with pytest.raises(UnsafeFileError, match=r"refusing to unpickle global posix\.mkdir"):
        safe_load(root / "data_batch_1")
    for i in range(2, 6):
        _dump(root / f"data_batch_{i}", {b"data": _cifar_images(2, 0), b"labels": [0, 1]})
    _dump(root / "test_batch", {b"data": _cifar_images(2, 0), b"labels": [0, 1]})
    with pytest.raises(UnsafeFileError):
        load_splits({"name": "cifar10", "path": str(root)})
    assert not target.exists()
    # object arrays are refused too (only numeric data arrays), and so are non-latin1 codec tricks
    _dump(tmp_path / "obj", {b"data": np.array([1, "x"], dtype=object)})
    with pytest.raises(UnsafeFileError, match="object-dtype"):
        safe_load(tmp_path / "obj")
    (tmp_path / "junk").write_bytes(b"\x80\x02not a pickle")
    with pytest.raises(UnsafeFileError, match="not a readable"):
        safe_load(tmp_path / "junk")


# ---------------------------------------------------------------------------------------------
# npz
# ---------------------------------------------------------------------------------------------
def test_npz_layouts_and_refusals(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "d.npz"
    np.savez(p, x_train=rng.integers(0, 256, (30, 9, 9, 3), dtype=np.uint8), y_train=np.arange(30) % 3,
             x_test=rng.integers(0, 256, (9, 9, 9, 3), dtype=np.uint8), y_test=np.arange(9) % 3)
    s = load_splits({"name": "npz", "path": str(p)})
    assert s.num_classes == 3 and len(s.test) == 9 and s.train.images.shape[1:] == (9, 9, 3)

    q = tmp_path / "pool.npz"
    np.savez(q, x=rng.uniform(0, 1, (40, 6, 6)).astype(np.float32), y=np.arange(40) % 4)
    s = load_splits({"name": "npz", "path": str(q)})
    assert s.num_classes == 4 and s.train.images.shape[1:] == (6, 6, 1)
    assert s.train.array(8).shape[1:] == (8, 8, 3)

    bad = tmp_path / "obj.npz"
    np.savez(bad, x=np.array([object(), 1], dtype=object), y=np.array([0, 1]))
    with pytest.raises(UnsafeFileError, match="object arrays"):
        load_splits({"name": "npz", "path": str(bad)})
    keys = tmp_path / "keys.npz"
    np.savez(keys, images=np.zeros((2, 4, 4), np.uint8))
    with pytest.raises(ConfigError, match=r"has arrays \['images'\]; expected .*x_train"):
        load_splits({"name": "npz", "path": str(keys)})
    rng255 = tmp_path / "range.npz"
    np.savez(rng255, x=np.full((4, 4, 4), 200.0), y=np.arange(4) % 2)
    with pytest.raises(ConfigError, match=r"outside \[0, 1\]"):
        load_splits({"name": "npz", "path": str(rng255)})
    for fill in (np.nan, np.inf):  # one bad pixel (NaN passed the range check: min/max compare false)
        x = rng.uniform(0, 1, (8, 4, 4)).astype(np.float32)
        x[3, 0, 0] = fill
        nan = tmp_path / "nan.npz"
        np.savez(nan, x_train=x, y_train=np.arange(8) % 2, x_test=x, y_test=np.arange(8) % 2)
        with pytest.raises(ConfigError,
                           match=r"nan.npz: array 'x_train' is float32 with 1 value\(s\) NaN or infinite"):
            load_splits({"name": "npz", "path": str(nan)})


def test_an_accuracy_over_nan_logits_is_refused_not_scored(monkeypatch):
    """argmax over a NaN row still picks a class: finetune scored a NaN test image as one (an ok row)."""
    from vitbench.transfer import ops

    logits = np.eye(3)[[0, 1, 2, 0]]
    logits[2, 1] = np.nan
    monkeypatch.setattr(ops, "predict", lambda *a, **k: (logits, np.array([0, 1, 2, 0])))
    with pytest.raises(ops.NonFiniteResult, match="logits of 4 images: 1 of 12 values are NaN"):
        ops.accuracy(None, None, [0] * 4, 8)


def test_data_config_rejects_unknown_fields_and_names():
    with pytest.raises(ValueError):
        DataConfig.model_validate({"name": "imagenet"})
    with pytest.raises(ValueError):
        DataConfig.model_validate({"nmae": "digits"})
    assert DataConfig(classes="1,3,5").classes == [1, 3, 5]
