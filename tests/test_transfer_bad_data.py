"""Bad data, one row per problem: exit 2 naming the file (no traceback, nothing written), or with --skip-corrupt
a count of the skipped files in the row and on the terminal."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from data_formats import (NEEDS_TFDS, digits_images, has_tfds, write_folder, write_hf_parquet,
                          write_shards)

FEWSHOT = ("fewshot", "-m", "ViT-Nano/4", "--objective", "none", "-r", "8", "--classes", "", "--shots", "1",
           "--seeds", "1", "--l2-reg", "1")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """Clean train/test digits (4 per class + 2 per class) as a folder, shards and an hf parquet folder."""
    root = tmp_path_factory.mktemp("good")
    x, y = digits_images(6, classes=3)
    test = np.concatenate([np.flatnonzero(y == c)[:2] for c in range(3)])
    train = np.setdiff1d(np.arange(len(y)), test)
    for split, idx in (("train", train), ("test", test)):
        write_folder(root / "folder", split, x[idx], y[idx])
        write_shards(root / "shards", split, x[idx], y[idx], per_shard=100)
        write_hf_parquet(root / "hf", split, x[idx], y[idx], ["0", "1", "2"])
    if has_tfds():
        _write_tfds(root / "tfds", x, y)
    return root, x, y


def _copy(good, tmp_path, what):
    shutil.copytree(good[0] / what, tmp_path / what)
    return tmp_path / what


def _truncate(path):
    path.write_bytes(path.read_bytes()[:60])


# (case, make(good, tmp_path) -> (data options, the path the message must name), the message's words)
CASES = {
    "missing folder": (lambda g, t: (["--data", "folder", "--data-path", str(t / "nope")], t / "nope"),
                       "does not exist"),
    "missing shard": (lambda g, t: (["--data", "webdataset", "--data-path", str(t / "s-{0..3}.tar")],
                                    t / "s-0.tar"), "shard does not exist"),
    "missing hf dir": (lambda g, t: (["--data", "hf", "--data-path", str(t / "hf")], t / "hf"), "does not exist"),
    "empty class folder": (lambda g, t: (_mk_empty_class(g, t), t / "folder" / "train" / "9"),
                           "class folder has no .png/.jpg/.jpeg images"),
    "train/test classes differ": (lambda g, t: (_mk_class_mismatch(g, t), t / "folder"),
                                  "train and test classes differ (only in train: ['2']"),
    "truncated image": (lambda g, t: _mk_corrupt(g, t, _truncate), "cannot be read as an image"),
    "not an image": (lambda g, t: _mk_corrupt(g, t, lambda p: p.write_text("hello")), "cannot be read as an image"),
    "truncated image in a shard": (lambda g, t: _mk_corrupt_shard(g, t), "cannot be read as an image"),
    "truncated shard": (lambda g, t: _mk_truncated_shard(g, t), "not a readable tar shard"),
    "shard cut at a member": (lambda g, t: _mk_cut_shard(g, t, 0), "ends without its end-of-archive block"),
    "shard cut in a header": (lambda g, t: _mk_cut_shard(g, t, 100), "ends without its end-of-archive block"),
    "a key twice in a shard": (lambda g, t: _mk_key_twice(g, t), "sample '00000' appears again after other"),
    # two samples of one key back to back: the first image was kept with the last label (every label wrong)
    "a key twice in a row": (lambda g, t: _mk_key_twice(g, t, in_a_row=True),
                             "sample '00000' has a second image member (after 00000.png, 00000.cls)"),
    "shard without labels": (lambda g, t: _mk_unlabelled(g, t), "has no .cls label"),
    "shard label out of range": (lambda g, t: _mk_out_of_range_shard(g, t), "label 7 out of range"),
    "hf label out of range": (lambda g, t: _mk_out_of_range_hf(g, t), "label 5 out of range for the 3 ClassLabel"),
    # a split's second file whose ClassLabel names are in another order: read by the first file's names, every
    # label of it named another class (accuracy 0.225 where consistent files gave 0.61)
    "hf files of one split with other names": (lambda g, t: _mk_reordered_hf(g, t),
                                               "are not those of train-00000-of-00002.parquet"),
    "hf without a label column": (lambda g, t: _mk_unlabelled_hf(g, t), "cannot tell the label column"),
    # labels that are no class index (the CIFAR pickles hold Python lists: a float 1.7 was class 1 in silence)
    "cifar float labels": (lambda g, t: _mk_cifar(t, [0.0, 1.7, 2.0]),
                           "labels must be integers, got floats (e.g. 0.0"),
    "cifar bool labels": (lambda g, t: _mk_cifar(t, [True, False, True]), "labels must be integers, got booleans"),
    "cifar string labels": (lambda g, t: _mk_cifar(t, ["x", "1", "2"]), "labels must be integers, got strings"),
    "cifar label past int64": (lambda g, t: _mk_cifar(t, [10**30, 1, 2]), f"out-of-range values (e.g. {10**30}"),
    "cifar empty test batch": (lambda g, t: _mk_cifar(t, []), "the test split has no images"),
    "npz label past int64": (lambda g, t: _mk_npz(g, t, np.array([0, 2**63 + 5, 1], np.uint64)),
                             f"label {2**63 + 5} out of range (past 2**63 - 1)"),
    "npz empty test split": (lambda g, t: _mk_npz(g, t, np.zeros(0, np.int64)), "the test split has no images"),
    "npz empty train split": (lambda g, t: _mk_npz(g, t, g[2], train=0), "the train split has no images"),
    "hf null label": (lambda g, t: _mk_hf_test(g, t, [0, None, 1]), "has 1 empty (null) labels"),
    "hf empty test split": (lambda g, t: _mk_hf_test(g, t, []), "the test split has no images"),
    "a tfds option for another format": (lambda g, t: (["--data", "folder", "--data-path", str(g[0] / "folder"),
                                                        "--tfds-name", "x"], "--tfds-name"), "takes no tfds_name"),
}
# the TFDS cases need tensorflow-datasets (the [tfds] extra, in [all]: CI runs them); else skipped, with the reason
TFDS_CASES = {
    "tfds unknown name": (lambda g, t: (["--data", "tfds", "--data-path", str(g[0] / "tfds"), "--tfds-name",
                                         "nope"], g[0] / "tfds"),
                          "no prepared TFDS dataset 'nope' (DatasetNotFoundError); prepared there: vitbench_bad"),
    "tfds name not given, two there": (lambda g, t: _mk_two_tfds(g, t), "2 TFDS datasets found"),
    # naming one with --tfds-name cannot help where there is none: the message says what the folder should be
    "tfds, none there": (lambda g, t: (["--data", "tfds", "--data-path", str(t)], t),
                         "no prepared TFDS dataset in it (give the data directory"),
    "tfds stored as tfrecord": (lambda g, t: _mk_tfrecord(g, t), "stored as tfrecord"),
    "tfds corrupt image": (lambda g, t: _mk_corrupt_tfds(g, t), "cannot be read as an image"),
}




def _write_tfds(t, x, y, name="vitbench_bad", spoil=None):
    from data_formats import write_tfds

    test = np.concatenate([np.flatnonzero(y == c)[:2] for c in range(3)])
    train = np.setdiff1d(np.arange(len(y)), test)
    return write_tfds(t, name, {"train": (x[train], y[train]), "test": (x[test], y[test])}, ["0", "1", "2"],
                      spoil=spoil)


def _mk_two_tfds(g, t):
    root = t / "tfds"
    shutil.copytree(g[0] / "tfds", root)
    _write_tfds(root, g[1], g[2], name="vitbench_other")
    return ["--data", "tfds", "--data-path", str(root)], root


def _mk_tfrecord(g, t):
    root = t / "tfds"
    shutil.copytree(g[0] / "tfds", root)
    info = root / "vitbench_bad" / "1.0.0" / "dataset_info.json"
    info.write_text(info.read_text().replace('"array_record"', '"tfrecord"'))  # as TFDS's default writes it
    return ["--data", "tfds", "--data-path", str(root)], "tfds convert_format"


def _mk_corrupt_tfds(g, t):
    _write_tfds(t / "tfds", g[1], g[2], spoil={("test", 1): lambda b: b[:60]})
    return (["--data", "tfds", "--data-path", str(t / "tfds")],
            t / "tfds" / "vitbench_bad" / "1.0.0" / "vitbench_bad-test.array_record-00000-of-00001 record 1")


def _mk_cifar(t, test_labels):
    """The CIFAR-10 python layout, 3 classes of 4 images per training batch, its test_batch labelled
    `test_labels` (a Python list, as CIFAR's own pickles hold them)."""
    import pickle

    root, rng = t / "cifar-10-batches-py", np.random.default_rng(0)
    root.mkdir()
    batches = {f"data_batch_{i}": [0, 1, 2, 0] for i in range(1, 6)} | {"test_batch": test_labels}
    for name, labels in batches.items():
        data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
        (root / name).write_bytes(pickle.dumps({b"data": data, b"labels": labels}, protocol=4))
    return ["--data", "cifar10", "--data-path", str(root)], root if not test_labels else root / "test_batch"


def _mk_npz(g, t, test_labels, train=None):
    from data_formats import write_npz

    x, y = g[1], g[2]
    path = write_npz(t / "d.npz", (x[:train], y[:train]), (x[:len(test_labels)], test_labels))
    return ["--data", "npz", "--data-path", str(path)], path


def _mk_hf_test(g, t, test_labels):
    x, y = g[1], g[2]
    write_hf_parquet(t / "hf", "train", x, y, ["0", "1", "2"])
    path = write_hf_parquet(t / "hf", "test", x[:len(test_labels)], test_labels, ["0", "1", "2"])
    return ["--data", "hf", "--data-path", str(t / "hf")], path if test_labels else t / "hf"


def _mk_unlabelled_hf(g, t):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from data_formats import png_bytes

    path = t / "hf" / "train.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"image": pa.array([{"bytes": png_bytes(im), "path": None} for im in g[1][:4]]),
                             "caption": ["a", "b", "c", "d"]}), path)
    return ["--data", "hf", "--data-path", str(t / "hf")], path


def _mk_empty_class(g, t):
    root = _copy(g, t, "folder")
    (root / "train" / "9").mkdir()
    return ["--data", "folder", "--data-path", str(root)]


def _mk_class_mismatch(g, t):
    root = _copy(g, t, "folder")
    shutil.rmtree(root / "test" / "2")
    return ["--data", "folder", "--data-path", str(root)]


def _mk_corrupt(g, t, spoil):
    root = _copy(g, t, "folder")
    bad = sorted((root / "test" / "1").iterdir())[0]
    spoil(bad)
    return ["--data", "folder", "--data-path", str(root)], bad


def _mk_corrupt_shard(g, t):
    x, y = g[1], g[2]
    write_shards(t / "s", "train", x, y, per_shard=100)
    test = np.concatenate([np.flatnonzero(y == c)[:2] for c in range(3)])  # every class: test must hold them
    paths = write_shards(t / "s", "test", x[test], y[test], per_shard=100)
    import tarfile

    with tarfile.open(paths[0]) as tf:  # rewrite the shard with its 3rd image cut short
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    from data_formats import _add

    with tarfile.open(paths[0], "w") as tf:
        for m, data in members:
            _add(tf, m.name, data[:60] if m.name == "00002.png" else data)
    return ["--data", "webdataset", "--data-path", str(t / "s")], f"{paths[0]}:00002.png"


def _mk_truncated_shard(g, t):
    root = _copy(g, t, "shards")
    shard = root / "train-000000.tar"
    shard.write_bytes(shard.read_bytes()[:1000])
    return ["--data", "webdataset", "--data-path", str(root)], shard


def _mk_cut_shard(g, t, into):
    """A shard cut at the header of its 5th member (`into` bytes into it): tarfile stops there without a word, and
    the shard was read as one of 2 samples."""
    import tarfile

    root = _copy(g, t, "shards")
    shard = root / "train-000000.tar"
    with tarfile.open(shard) as tf:
        at = tf.getmembers()[4].offset
    shard.write_bytes(shard.read_bytes()[:at + into])
    return ["--data", "webdataset", "--data-path", str(root)], shard


def _mk_key_twice(g, t, in_a_row: bool = False):
    """Two shards' members appended into one (`tar -A`): keys 00000.. twice; the first image was kept with the
    last label, and the second run's samples were lost. `in_a_row`: each key's two samples one after the other
    (the check only looked for a key coming back after others)."""
    import tarfile

    from data_formats import _add, png_bytes

    x, y = g[1], g[2]
    write_shards(t / "s", "test", x[:3], y[:3], per_shard=100)
    path = t / "s" / "train-000000.tar"
    order = [i for i in range(len(x)) for _ in range(2)] if in_a_row else [*range(len(x)), 0]
    with tarfile.open(path, "w") as tf:
        for i in order:
            _add(tf, f"{i:05d}.png", png_bytes(x[i]))
            _add(tf, f"{i:05d}.cls", str(int(y[(i + 1) % len(y)])).encode())
    return ["--data", "webdataset", "--data-path", str(t / "s")], f"{path}:00000.png"


def _mk_unlabelled(g, t):
    x, y = g[1], g[2]
    write_shards(t / "s", "train", x, y, per_shard=100)
    paths = write_shards(t / "s", "test", x[:3], y[:3], per_shard=100, label=False)
    return ["--data", "webdataset", "--data-path", str(t / "s")], paths[0]


def _mk_out_of_range_shard(g, t):
    x, y = g[1], g[2]
    write_shards(t / "s", "train", x, y, per_shard=100)
    paths = write_shards(t / "s", "test", x[:3], np.array([0, 7, 1]), per_shard=100)
    return ["--data", "webdataset", "--data-path", str(t / "s")], f"{paths[0]}:00001.png"


def _mk_reordered_hf(g, t):
    x, y = g[1], g[2]
    first = write_hf_parquet(t / "hf", "train", x, y, ["0", "1", "2"])
    first = first.rename(first.with_name("train-00000-of-00002.parquet"))
    second = write_hf_parquet(t / "other", "train", x, 2 - y, ["2", "1", "0"])  # its labels by its own names
    second = second.rename(first.with_name("train-00001-of-00002.parquet"))
    write_hf_parquet(t / "hf", "test", x[:3], y[:3], ["0", "1", "2"])
    return ["--data", "hf", "--data-path", str(t / "hf")], second


def _mk_out_of_range_hf(g, t):
    x, y = g[1], g[2]
    write_hf_parquet(t / "hf", "train", x, y, ["0", "1", "2"])
    path = write_hf_parquet(t / "hf", "test", x[:3], np.array([0, 5, 1]), ["0", "1", "2"])
    return ["--data", "hf", "--data-path", str(t / "hf")], path


@pytest.mark.parametrize("case", [*CASES, *(pytest.param(c, marks=NEEDS_TFDS) for c in TFDS_CASES)])
def test_bad_data_exits_2_naming_the_file(case, good, tmp_path, cli):
    make, words = {**CASES, **TFDS_CASES}[case]
    args, named = make(good, tmp_path)
    r = cli(*FEWSHOT, *args)
    text = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert str(named) in text and words in text, text
    assert "Traceback" not in r.output


@pytest.mark.parametrize("fmt", ["folder", "webdataset"])
def test_skip_corrupt_counts_the_skipped_files_in_the_row_and_on_the_terminal(fmt, good, tmp_path, cli):
    if fmt == "folder":
        args, bad = _mk_corrupt(good, tmp_path, _truncate)
    else:
        args, bad = _mk_corrupt_shard(good, tmp_path)
    r = cli(*FEWSHOT, *args, "--skip-corrupt", "--json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)
    assert row["metrics"]["skipped_files"] == 1 and row["config"]["data"]["skip_corrupt"] is True
    assert "1 corrupt files skipped" in " ".join(r.output.split()) and str(bad) in " ".join(r.output.split())
    assert row["metrics"]["embedded_images"] < 18  # the test split lost its one corrupt image


@pytest.mark.parametrize("fmt", ["folder", "webdataset"])
def test_check_data_finds_a_corrupt_file_before_any_work(fmt, good, tmp_path, cli):
    """--check-data verifies every listed image up front: a corrupt one exits 2 from the check pass (before a
    model is built), naming it and counting the corrupt files; with --skip-corrupt it is counted from the start."""
    args, bad = _mk_corrupt(good, tmp_path, _truncate) if fmt == "folder" else _mk_corrupt_shard(good, tmp_path)
    r = cli("pretrain", "ViT-Nano/4", *args, "--classes", "", "-r", "8", "--steps", "2", "-b", "4",
            "--out", tmp_path / "up.safetensors", "--check-data")
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "--check-data: 1 corrupt files in" in text and str(bad) in text, text
    assert "Traceback" not in r.output and not (tmp_path / "up.safetensors").exists()  # nothing half-written
    r = cli(*FEWSHOT, *args, "--check-data", "--skip-corrupt", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"]["skipped_files"] == 1 and str(bad) in " ".join(r.output.split())


def test_check_image_tells_whole_images_from_damaged_ones():
    """The check is cheaper than a decode but as strict on what a run would hit: a PNG cut anywhere after its
    header, a JPEG missing its tail, bytes that are no image; whole images of both kinds pass."""
    import io

    from PIL import Image

    from vitbench.transfer.pools import CorruptImage, check_image

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    whole = {}
    for fmt in ("PNG", "JPEG"):
        buf = io.BytesIO()
        image.save(buf, format=fmt)
        whole[fmt] = buf.getvalue()
        check_image(whole[fmt], fmt)  # a whole image passes
    for name, data in (("png cut", whole["PNG"][:len(whole["PNG"]) // 2]), ("png cut before IEND",
                       whole["PNG"][:-20]), ("jpeg cut", whole["JPEG"][:len(whole["JPEG"]) // 2]),
                       ("not an image", b"hello")):
        with pytest.raises(CorruptImage, match=name):
            check_image(data, name)


def test_tfds_without_the_library_names_the_extra(good, cli, monkeypatch):
    """Without tensorflow-datasets, --data tfds exits 2 saying which extra brings it (no ImportError traceback)."""
    import sys

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails as if not installed
    r = cli(*FEWSHOT, "--data", "tfds", "--data-path", str(good[0]))
    assert r.exit_code == 2 and "pip install 'vitbench[tfds]'" in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output
