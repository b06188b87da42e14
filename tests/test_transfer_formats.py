"""The same images give the same few-shot accuracy whichever format holds them (folder, webdataset shards, hf
parquet and save_to_disk, a prepared TFDS dataset, an in-memory .npz), and streaming keeps only what the protocol
reads. The TFDS fixture needs tensorflow-datasets (the [tfds] extra, part of [all], which CI installs); without it
the tfds cases are reported as skipped with the reason (pytest -ra), never dropped silently."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data_formats import (digits_images, has_tfds, write_folder, write_hf_arrow, write_hf_parquet, write_npz,
                          write_shards, write_tfds)
from tolerances_stat import gamma
from vitbench.transfer.data import load_splits

PER_CLASS, TEST_PER_CLASS = 12, 4  # 10 classes: 120 train images, 40 test
TFDS_NAME = "vitbench_digits"  # the fixture's TFDS dataset (generated here; nothing downloaded)


NO_TFDS = "tensorflow-datasets is not installed (pip install 'vitbench[tfds]'; CI installs it through [all])"


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    """{format: DataConfig fields} of one set of digits images (train + test) written in every format."""
    root = tmp_path_factory.mktemp("formats")
    x, y = digits_images(PER_CLASS + TEST_PER_CLASS)
    test = np.concatenate([np.flatnonzero(y == c)[:TEST_PER_CLASS] for c in range(10)])
    train = np.setdiff1d(np.arange(len(y)), test)
    write_folder(root / "folder", "train", x[train], y[train])
    write_folder(root / "folder", "test", x[test], y[test])
    write_shards(root / "shards", "train", x[train], y[train], per_shard=50)
    write_shards(root / "shards", "test", x[test], y[test], per_shard=50)
    names = [str(c) for c in range(10)]
    write_hf_parquet(root / "hf", "train", x[train], y[train], names)
    write_hf_parquet(root / "hf", "test", x[test], y[test], names)
    write_hf_arrow(root / "hf-arrow", "train", x[train], y[train], names)
    write_hf_arrow(root / "hf-arrow", "test", x[test], y[test], names)
    npz = write_npz(root / "digits.npz", (x[train], y[train]), (x[test], y[test]))
    tfds = {}
    if has_tfds():
        write_tfds(root / "tfds", TFDS_NAME, {"train": (x[train], y[train]), "test": (x[test], y[test])}, names)
        tfds = {"tfds": {"name": "tfds", "path": str(root / "tfds"), "tfds_name": TFDS_NAME}}
    return {**tfds, "npz": {"name": "npz", "path": str(npz)},
            "folder": {"name": "folder", "path": str(root / "folder")},
            "webdataset": {"name": "webdataset", "path": str(root / "shards")},
            "webdataset-pattern": {"name": "webdataset", "path": str(root / "shards" / "train-{000000..000002}.tar"),
                                   "test_path": str(root / "shards" / "test-000000.tar")},
            "hf": {"name": "hf", "path": str(root / "hf")},
            "hf-arrow": {"name": "hf", "path": str(root / "hf-arrow")}}


@pytest.mark.parametrize("fmt", ["folder", "webdataset", "webdataset-pattern", "hf", "hf-arrow",
                                 pytest.param("tfds", marks=pytest.mark.skipif(not has_tfds(), reason=NO_TFDS))])
def test_every_format_lists_the_same_splits_and_batches(formats, fmt):
    ref, got = load_splits(formats["npz"]), load_splits(formats[fmt])
    assert ref.train.pool.resident and not got.train.pool.resident
    for a, b in ((ref.train, got.train), (ref.val, got.val), (ref.test, got.test)):
        np.testing.assert_array_equal(a.labels, b.labels)
        idx = np.arange(len(a))
        np.testing.assert_array_equal(a.batch(idx, 16)[0], b.batch(idx, 16)[0])  # same bytes -> same floats


@pytest.mark.skipif(not has_tfds(), reason=NO_TFDS)
def test_tfds_name_may_be_left_out_when_the_data_dir_holds_one_dataset(formats):
    named = load_splits(formats["tfds"])
    found = load_splits({"name": "tfds", "path": formats["tfds"]["path"]})
    assert found.source == f"tfds:{formats['tfds']['path']}" and named.source.endswith(TFDS_NAME)
    np.testing.assert_array_equal(named.test.labels, found.test.labels)
    assert found.train.class_names == [str(c) for c in range(10)]  # the ClassLabel's names


def test_fewshot_accuracy_is_the_same_in_every_format(formats, cli):
    """One random-init upstream (no pre-training: seconds), few-shot on each format: identical accuracies."""
    rows = {}
    for fmt, data in formats.items():
        args = ["--data", data["name"], "--data-path", data["path"]]
        if "test_path" in data:
            args += ["--data-test-path", data["test_path"]]
        if "tfds_name" in data:
            args += ["--tfds-name", data["tfds_name"]]
        r = cli("fewshot", "-m", "ViT-Nano/4", "--objective", "none", "-r", "16", "--classes", "", "--shots", "1,5",
                "--seeds", "2", *args, "--json")
        assert r.exit_code == 0, r.output
        rows[fmt] = json.loads(r.stdout)["metrics"]
    ref = rows.pop("npz")
    assert ref["accuracy"] > ref["chance_accuracy"]  # the fixture can tell formats apart
    for fmt, m in rows.items():
        for k in ("accuracy_1shot", "accuracy_5shot", "accuracy_5shot_std"):
            assert m[k] == ref[k], (fmt, k)
        # only the k-shot draws of train are decoded: 10 classes x <= (1 + 5) x 2 seeds (nested), plus val, test
        assert m["embedded_images"] <= 10 * 5 * 2 + 12 + 40 < 120 + 40, m["embedded_images"]
        assert m["skipped_files"] == 0


def test_worker_processes_give_the_same_batches(formats):
    """--data-workers decodes in spawned processes; the batches (and so every result) are those of workers=0."""
    inline = load_splits(formats["webdataset"]).test
    spawned = load_splits({**formats["webdataset"], "workers": 2}).test
    a = list(inline.batches(16, 16))
    b = list(spawned.batches(16, 16))
    assert len(a) == len(b) == -(-len(inline) // 16)
    for (xa, ya, ra), (xb, yb, rb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(ra, rb)
    m = spawned.input.metrics()
    assert m["input_images"] == len(inline) and m["input_img_per_s"] > 0 and 0 <= m["input_bound_fraction"] <= 1


@pytest.mark.parametrize("fmt", ["npz", "webdataset"])
def test_training_rows_say_what_input_cost(formats, cli, tmp_path, fmt):
    """A pre-training row measures its input: images/s of decode + preprocess alone, and the share of the
    training time spent waiting on it (a fraction: 0..1)."""
    data = formats[fmt]
    r = cli("pretrain", "ViT-Nano/4", "--data", data["name"], "--data-path", data["path"], "--classes", "",
            "-r", "16", "--steps", "3", "-b", "8", "--out", tmp_path / "up", "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["metrics"]
    assert m["input_img_per_s"] > 0 and 0 < m["input_bound_fraction"] <= 1 and m["skipped_files"] == 0


def test_training_with_worker_processes_gives_the_same_run(formats, cli, tmp_path, monkeypatch):
    """--data-workers changes who decodes, not what: the same losses and accuracy as decoding in-process (each
    run in a cache of its own: the worker count is no part of the upstream's cache key, so the second run would
    load the first's)."""
    from vitbench.protocols.pretrain import CACHE_ENV  # the upstream checkpoints' cache

    data = formats["webdataset"]
    rows = []
    for workers in ("0", "2"):
        monkeypatch.setenv(CACHE_ENV, str(tmp_path / f"cache{workers}"))
        r = cli("pretrain", "ViT-Nano/4", "--data", "webdataset", "--data-path", data["path"], "--classes", "",
                "-r", "16", "--steps", "4", "-b", "8", "--data-workers", workers, "--out", tmp_path / workers,
                "--json")
        assert r.exit_code == 0, r.output
        rows.append(json.loads(r.stdout))
    assert rows[0]["raw"]["loss"] == rows[1]["raw"]["loss"]
    assert rows[0]["metrics"]["accuracy"] == rows[1]["metrics"]["accuracy"]


def test_bench_train_with_real_input_reports_it_beside_the_synthetic_figure(formats, cli):
    data = formats["webdataset"]
    r = cli("bench", "ViT-Nano/4", "--task", "train", "-b", "8", "-r", "16", "--min-steps", "3", "--min-seconds",
            "0.1", "--warmup", "1", "--threads", "1", "--data", "webdataset", "--data-path", data["path"],
            "--data-steps", "3", "--json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)
    m, raw = row["metrics"], row["raw"]
    assert m["img_per_s"] > 0 and m["real_input_img_per_s"] > 0 and m["input_img_per_s"] > 0
    assert 0 < m["input_bound_fraction"] <= 1
    # the real-input loop's recipe, which is not the synthetic steps' (the row's optimizer, precision)
    assert (m["real_input_optimizer"], m["real_input_precision"]) == ("adam", "fp32")
    # timed as the synthetic figure: warm-up apart (--warmup 1), >= MIN_WINDOWS windows of >= 2 steps covering
    # --data-steps, raw window times kept, the median window's per-step time behind img/s
    from vitbench.measure.timing import MIN_WINDOWS

    assert len(raw["real_input_warmup_s"]) == 1 and len(raw["real_input_window_s"]) == m["real_input_windows"]
    assert m["real_input_windows"] >= MIN_WINDOWS and m["real_input_window_steps"] >= 2
    assert m["real_input_steps"] == m["real_input_windows"] * m["real_input_window_steps"] >= 3
    per_step = sorted(w / m["real_input_window_steps"] for w in raw["real_input_window_s"])
    # float64: vitbench divides, scales to ms and back (x 1000, / 1000), takes the median (a mean of two: 2) and
    # 8 / it (6 roundings); here the division, the median and 8 / it (4): the same windows, in the same order
    assert m["real_input_img_per_s"] == pytest.approx(8 / float(np.median(per_step)), rel=gamma(6 + 4))
    r = cli("bench", "ViT-Nano/4", "--data", "webdataset", "--data-path", data["path"])  # infer: no training
    assert r.exit_code == 2 and "use it with --task train" in r.output
    r = cli("bench", "ViT-Nano/4", "--task", "train", "--data", "folder", "--data-path", data["path"] + "/nope")
    assert r.exit_code == 2 and "does not exist" in r.output and "img_per_s" not in r.output  # before any timing


def test_study_fields_name_the_tfds_dataset_up_and_downstream():
    """tfds_name / upstream_tfds_name reach the data configs; left out of the trial's fields when unset (keys
    of studies without them stay as they were)."""
    from vitbench.tasks.pretrain import Pretrain

    base = {"task": "pretrain", "model": "ViT-Nano/4"}
    p = Pretrain.Params.model_validate({**base, "upstream_dataset": "tfds", "upstream_path": "/d",
                                        "upstream_tfds_name": "cifar10"})
    assert p.upstream_config("pretrain").data.tfds_name == "cifar10"
    assert "upstream_tfds_name" not in Pretrain.Params.model_validate(base).model_dump()
