"""Real-world dataset quirks each format meets (a data review's findings): image suffixes beyond PNG and JPEG,
files and folders a listing leaves out (said, never silently), macOS's hidden files in folders and tars, splits
read by name (a Hub parquet layout's `validation`, a folder's `val/`), a path-only hf row, class names that differ
only in Unicode normalisation, messages that name the member, and one rule for a test split missing a class. Tiny
images (8 px), listed by the readers directly: nothing is trained."""

from __future__ import annotations

import io
import json
import tarfile
import unicodedata
import warnings

import numpy as np
import pytest

from vitbench.errors import ConfigError, VitbenchWarning
from vitbench.transfer.config import DataConfig
from vitbench.transfer.pools import CorruptImage
from vitbench.transfer.sources import read_source


def _image(c: int, i: int = 0) -> np.ndarray:
    """An 8 x 8 RGB image of class `c` (its colour) and index `i` (a bright pixel)."""
    a = np.zeros((8, 8, 3), np.uint8)
    a[..., c % 3] = 60 + 60 * (c // 3)
    a[i % 8, i // 8 % 8] = 255
    return a


def _encoded(a: np.ndarray, fmt: str = "PNG") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format=fmt)
    return buf.getvalue()


def _folder(root, classes=("a", "b"), n=3, suffix="png"):
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            (root / name / f"img{i:03d}.{suffix}").write_bytes(_encoded(_image(c, i)))
    return root


def _read(name: str, path, **kw):
    """read_source's Raw and the VitbenchWarning texts it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raw = read_source(DataConfig.model_validate({"name": name, "path": str(path), **kw}))
    return raw, [str(w.message) for w in caught if issubclass(w.category, VitbenchWarning)]


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _shard(path, samples, macos: bool = False):
    """A tar of (key, label, image bytes) samples; `macos`: as macOS's tar writes it (`./` names, a `._`
    AppleDouble member before each file, a .DS_Store)."""
    with tarfile.open(path, "w") as tf:
        for key, label, data in samples:
            for ext, body in (("png", data), ("cls", str(label).encode())):
                if macos:
                    _add(tf, f"./._{key}.{ext}", b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(40))
                _add(tf, f"./{key}.{ext}" if macos else f"{key}.{ext}", body)
        if macos:
            _add(tf, "./.DS_Store", b"\x00\x00\x00\x01Bud1" + bytes(50))
    return path


def _parquet(path, rows, names=("a", "b")):
    """A parquet file as `datasets` writes one: rows of (image bytes or None, path or None, label)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array([{"bytes": b, "path": p} for b, p, _ in rows], image_type),
                      "label": pa.array([y for *_, y in rows], pa.int64())})
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": list(names)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})}),
                   path)
    return path


def _rows(classes=(0, 1), n=3, offset=0):
    return [(_encoded(_image(c, i + offset)), None, c) for c in classes for i in range(n)]


# ---------------------------------------------------------------------------------------------------------------
# folder: suffixes, what is left out, hidden files, val/
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt,suffix", [("WEBP", "webp"), ("BMP", "bmp"), ("TIFF", "tif"), ("TIFF", "tiff"),
                                        ("GIF", "gif"), ("BMP", "BMP")])
def test_folder_reads_the_common_image_suffixes_pil_decodes(tmp_path, fmt, suffix):
    _folder(tmp_path, n=2)
    for i in range(3):
        (tmp_path / "a" / f"more{i}.{suffix}").write_bytes(_encoded(_image(0, 10 + i), fmt))
    raw, said = _read("folder", tmp_path)
    assert np.bincount(raw.labels).tolist() == [5, 2] and not said
    got = [raw.pool.decode(i) for i in range(len(raw.pool)) if raw.pool.origin(i).endswith(suffix)]
    assert len(got) == 3 and all(a.shape == (8, 8, 3) and a.dtype == np.uint8 for a in got)
    if fmt != "WEBP":  # lossless formats (a GIF's palette holds these few colours): the pixels as written
        assert np.array_equal(got[0], _image(0, 10))


def test_folder_says_which_files_and_subfolders_it_leaves_out(tmp_path):
    _folder(tmp_path)
    for i in range(5):
        (tmp_path / "a" / f"photo{i}.heic").write_bytes(b"not read")
    (tmp_path / "b" / "notes.txt").write_text("x")
    (tmp_path / "b" / "more").mkdir()
    (tmp_path / "b" / "more" / "x.png").write_bytes(_encoded(_image(1, 5)))
    raw, said = _read("folder", tmp_path)
    assert np.bincount(raw.labels).tolist() == [3, 3]
    files, = [s for s in said if "not an image suffix" in s]
    assert "6 files (.heic 5, .txt 1)" in files and files.count(str(tmp_path)) == 1 + 3 and "..." in files
    dirs, = [s for s in said if "sub-folder" in s]
    assert "nothing is read recursively" in dirs and str(tmp_path / "b" / "more") in dirs


def test_folder_without_images_names_the_files_it_holds(tmp_path):
    _folder(tmp_path)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.heic").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"c: class folder has no \.png/\.jpg/\.jpeg images .*\.heic 1"):
        read_source(DataConfig.model_validate({"name": "folder", "path": str(tmp_path)}))


def test_folder_skips_hidden_files(tmp_path):
    """macOS's AppleDouble `._img000.png` (no image) and `.DS_Store` are not images of the class."""
    _folder(tmp_path)
    (tmp_path / "a" / "._img000.png").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(40))
    (tmp_path / "a" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(50))
    raw, said = _read("folder", tmp_path)
    assert np.bincount(raw.labels).tolist() == [3, 3] and not said
    assert not any("._" in raw.pool.origin(i) for i in range(len(raw.pool)))


def test_folder_val_beside_train_and_test_is_said_not_read(tmp_path):
    for split in ("train", "val", "test"):
        _folder(tmp_path / split)
    raw, said = _read("folder", tmp_path, val_fraction=0.2)
    assert len(raw.pool) == len(raw.test_pool) == 6  # val/'s images in neither split
    val, = [s for s in said if "'val'" in s]
    assert "not read" in val and "data.val_fraction (0.2) of train/" in val


def test_folder_class_names_in_nfc_and_nfd_are_the_same_class(tmp_path):
    nfc, nfd = (unicodedata.normalize(f, "café") for f in ("NFC", "NFD"))
    _folder(tmp_path / "train", classes=(nfc, "cafz"))
    _folder(tmp_path / "test", classes=(nfd, "cafz"))  # as macOS writes a name: decomposed
    raw, _ = _read("folder", tmp_path)
    assert raw.class_names == ["cafz", nfc]  # code point order of the NFC names in both splits
    assert np.array_equal(np.unique(raw.test_labels), [0, 1])
    for i in range(len(raw.test_pool)):  # each test image under its own class (NFD sorts 'cafe\u0301' first)
        assert (raw.test_labels[i] == 1) == (nfd in raw.test_pool.origin(i))


def test_folder_twin_class_folders_differing_only_in_normalisation_are_refused(tmp_path):
    _folder(tmp_path, classes=tuple(unicodedata.normalize(f, "café") for f in ("NFC", "NFD")))
    with pytest.raises(ConfigError, match="differ only in Unicode normalisation"):
        read_source(DataConfig.model_validate({"name": "folder", "path": str(tmp_path)}))


def test_same_classes_compares_names_in_nfc():
    from vitbench.transfer.raw import same_classes

    same_classes(["a", unicodedata.normalize("NFC", "café")], ["a", unicodedata.normalize("NFD", "café")], "x")
    with pytest.raises(ConfigError, match=r"only in train: \['b'\], only in test: \[\]"):
        same_classes(["a", "b"], ["a"], "x")


def test_steps_on_no_readable_image_count_files_not_reads(tmp_path):
    """Training steps over a split whose files are all corrupt said "all 20 images read were skipped (8 skipped
    in all)": the steps' order repeats the files, and the error counted the reads (session 31)."""
    from vitbench.transfer.data import load_splits

    _folder(tmp_path, n=8)
    for f in tmp_path.rglob("*.png"):
        f.write_bytes(b"not a png")
    train = load_splits({"name": "folder", "path": str(tmp_path), "skip_corrupt": True, "workers": 0}).train
    order = np.resize(np.arange(len(train)), (5, 4))  # 20 reads of the split's files
    with pytest.raises(ConfigError, match=rf"all {len(train)} images read were skipped as corrupt "
                       rf"\(--skip-corrupt; {len(train)} skipped in all"):
        list(train.steps(order, 8))


@pytest.mark.parametrize("train, test, first", [(["a", "b", "c"], ["a", "c", "b"], r"class 1: \['b'\] in train, "
                                                 r"\['c'\] in test"),
                                                (["a", "b"], ["a", "b", "b"], r"class 2: \[\] in train, \['b'\]")])
def test_same_classes_in_another_order_names_the_first_difference(train, test, first):
    """Names in another order (an hf split's ClassLabel) said "classes differ (only in train: [], only in test:
    [])": the message contradicted itself (session 30's Left list)."""
    from vitbench.transfer.raw import same_classes

    with pytest.raises(ConfigError, match=f"same classes in another order or with repeats .*{first}") as e:
        same_classes(train, test, "x")
    assert "only in" not in str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# webdataset
# ---------------------------------------------------------------------------------------------------------------
def test_webdataset_skips_the_hidden_members_of_a_macos_tar(tmp_path):
    samples = [(f"s{c}{i}", c, _encoded(_image(c, i))) for c in range(2) for i in range(3)]
    _shard(tmp_path / "train-000.tar", samples, macos=True)
    raw, _ = _read("webdataset", tmp_path)
    assert raw.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert raw.pool.origin(0).endswith(":./s00.png") and raw.pool.decode(0).shape == (8, 8, 3)


def test_webdataset_names_the_shards_beside_train_and_test_it_does_not_read(tmp_path):
    """A val-000.tar beside train-000.tar was left unread without a word (the test split cut from train); hf and
    folder say a split they leave (found by a review)."""
    samples = [(f"s{c}{i}", c, _encoded(_image(c, i))) for c in range(2) for i in range(3)]
    _shard(tmp_path / "train-000.tar", samples)
    _shard(tmp_path / "val-000.tar", samples)
    raw, said = _read("webdataset", tmp_path)
    assert len(raw.labels) == 6
    assert any("1 shard(s) not read" in w and "val-000.tar" in w for w in said), said
    (tmp_path / "alone").mkdir()
    _shard(tmp_path / "alone" / "train-000.tar", samples)
    _, quiet = _read("webdataset", tmp_path / "alone")
    assert not any("not read" in w for w in quiet), quiet


def test_a_corrupt_member_is_named_not_its_buffer(tmp_path):
    samples = [(f"s{c}{i}", c, _encoded(_image(c, i))) for c in range(2) for i in range(3)]
    samples[1] = ("s01", 0, b"hello, not a png")
    raw, _ = _read("webdataset", _shard(tmp_path / "train-000.tar", samples))
    with pytest.raises(CorruptImage) as e:
        raw.pool.decode(1)
    assert e.value.origin.endswith("train-000.tar:s01.png") and "BytesIO" not in str(e.value)
    assert "cannot identify image file" in e.value.reason


# ---------------------------------------------------------------------------------------------------------------
# hf
# ---------------------------------------------------------------------------------------------------------------
def test_hf_reads_splits_by_name_and_says_validation_is_not_read(tmp_path):
    """The Hub's train + validation layout (no test split): validation is never trained on."""
    _parquet(tmp_path / "data" / "train-00000-of-00001.parquet", _rows())
    _parquet(tmp_path / "data" / "validation-00000-of-00001.parquet", _rows(n=2, offset=20))
    raw, said = _read("hf", tmp_path)
    assert len(raw.pool) == 6 and raw.test_pool is None  # the test split: test_fraction of train, later
    assert all("train-" in raw.pool.origin(i) for i in range(6))
    note, = said
    assert "data/validation-00000-of-00001.parquet" in note and "data.val_fraction (0.1) of train" in note


def test_hf_validation_beside_test_is_said_not_read(tmp_path):
    _parquet(tmp_path / "data" / "train-00000-of-00001.parquet", _rows())
    _parquet(tmp_path / "data" / "validation-00000-of-00001.parquet", _rows(n=2, offset=20))
    _parquet(tmp_path / "data" / "test-00000-of-00001.parquet", _rows(n=2, offset=40))
    raw, said = _read("hf", tmp_path)
    assert (len(raw.pool), len(raw.test_pool)) == (6, 4)
    assert len(said) == 1 and "validation" in said[0] and "not read" in said[0]


def test_hf_dataset_dict_split_other_than_train_and_test_is_said_not_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split, n in (("train", 3), ("validation", 2)):
        table = pq.read_table(_parquet(tmp_path / "p" / f"{split}.parquet", _rows(n=n)))
        (tmp_path / "d" / split).mkdir(parents=True)
        with pa.OSFile(str(tmp_path / "d" / split / "data-00000-of-00001.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as w:
                w.write_table(table)
    (tmp_path / "d" / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation"]}))
    raw, said = _read("hf", tmp_path / "d")
    assert len(raw.pool) == 6 and len(said) == 1 and "split ['validation'] not read" in said[0]


def test_hf_relative_image_path_is_read_beside_its_file(tmp_path, monkeypatch):
    """A row of `datasets`' Image feature with no bytes, only a path relative to the parquet file's directory."""
    data = tmp_path / "ds" / "data"
    (data / "imgs").mkdir(parents=True)
    rows = []
    for c in range(2):
        for i in range(3):
            (data / "imgs" / f"{c}{i}.png").write_bytes(_encoded(_image(c, i)))
            rows.append((None, f"imgs/{c}{i}.png", c))
    _parquet(data / "train-00000-of-00001.parquet", rows)
    monkeypatch.chdir(tmp_path)  # not the directory the paths are relative to
    raw, _ = _read("hf", tmp_path / "ds")
    assert np.array_equal(raw.pool.decode(4), _image(1, 1))


# ---------------------------------------------------------------------------------------------------------------
# npz, and a test split missing a class in every format
# ---------------------------------------------------------------------------------------------------------------
def test_npz_16_bit_images_are_refused_saying_what_is_accepted(tmp_path):
    x = np.stack([_image(c, i) for c in range(2) for i in range(3)]).astype(np.uint16) * 257
    np.savez(tmp_path / "u16.npz", x=x, y=np.repeat([0, 1], 3))
    with pytest.raises(ConfigError, match=r"'x' is uint16: 16-bit integer image arrays are not accepted, only "
                                          r"uint8 \[0, 255\] or floats in \[0, 1\]"):
        read_source(DataConfig.model_validate({"name": "npz", "path": str(tmp_path / "u16.npz")}))


def test_a_test_class_whose_every_image_was_skipped_is_said(tmp_path):
    """With --skip-corrupt, every test image of class 'a' corrupt: the accuracy is over the other classes, and the
    row was `ok` without a word of it (found by a review); the warning names the class."""
    from vitbench.errors import VitbenchWarning
    from vitbench.transfer.data import load_splits

    _folder(tmp_path / "train", classes=("a", "b", "c"))
    _folder(tmp_path / "test", classes=("a", "b", "c"))
    for f in (tmp_path / "test" / "a").iterdir():
        f.write_bytes(b"not a png")
    splits = load_splits({"name": "folder", "path": str(tmp_path), "skip_corrupt": True, "classes": None})
    read = sum(len(y) for _, y, _ in splits.test.batches(8, 4))
    assert read == 6
    with pytest.warns(VitbenchWarning, match=r"every test image of 1 of the 3 classes .* was skipped as corrupt: "
                                             r".*'a'.*the accuracy is over the other classes"):
        splits.warn_skipped()


def test_npz_images_of_no_pixels_are_refused(tmp_path):
    """20 images of 0 x 0 pixels read as constant images and gave an `ok` accuracy at chance (found by a review)."""
    np.savez(tmp_path / "z.npz", x=np.zeros((20, 0, 0), np.uint8), y=np.arange(20) % 2)
    with pytest.raises(ConfigError, match=r"'x' has shape \(20, 0, 0, 1\).*H and W at least 1"):
        read_source(DataConfig.model_validate({"name": "npz", "path": str(tmp_path / "z.npz")}))


def _test_missing_class(fmt, root):
    """A dataset of `fmt` whose train split has classes 0, 1, 2 and whose test split only 0, 1: its config."""
    x = {s: [_image(c, i + 10 * (s == "test")) for c in range(3 - (s == "test")) for i in range(3)]
         for s in ("train", "test")}
    y = {s: np.repeat(np.arange(3 - (s == "test")), 3) for s in ("train", "test")}
    if fmt == "folder":
        for s in x:
            _folder(root / s, classes=("a", "b", "c")[:3 - (s == "test")])
        return root
    if fmt == "webdataset":
        for s in x:
            _shard(root / f"{s}-000.tar", [(f"{s}{k}", int(y[s][k]), _encoded(a)) for k, a in enumerate(x[s])])
        return root
    if fmt == "npz":
        np.savez(root / "d.npz", x_train=np.stack(x["train"]), y_train=y["train"], x_test=np.stack(x["test"]),
                 y_test=y["test"])
        return root / "d.npz"
    for s in x:
        _parquet(root / "data" / f"{s}-00000-of-00001.parquet",
                 [(_encoded(a), None, int(c)) for a, c in zip(x[s], y[s])], names=("a", "b", "c"))
    return root


@pytest.mark.parametrize("fmt,named", [("folder", "'c'"), ("webdataset", "'2'"), ("npz", "'2'"), ("hf", "'c'")])
def test_a_test_split_missing_a_class_exits_2_in_every_format(tmp_path, fmt, named):
    path = _test_missing_class(fmt, tmp_path)
    with pytest.raises(ConfigError, match=rf"train and test classes differ \(only in train: \[{named}\], only in "
                                          r"test: \[\]\)"):
        read_source(DataConfig.model_validate({"name": fmt, "path": str(path)}))
