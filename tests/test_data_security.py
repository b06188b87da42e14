"""Datasets crafted to attack the reader, refused before they act (exit 2 naming the file): a TFDS dataset whose
metadata names a feature class outside tensorflow-datasets (which tensorflow-datasets would import, running the
module), an .npz whose members declare more than the memory budget (a zip bomb) or inflate past their declared
size. Each attack is checked live (the payload runs when imported; the old readers ran it or inflated it)."""

from __future__ import annotations

import io
import json
import shutil
import struct
import sys
import tracemalloc
import uuid
import zipfile

import numpy as np
import pytest

from data_formats import NEEDS_TFDS, digits_images, has_tfds
from vitbench.errors import ConfigError
from vitbench.transfer.config import DataConfig
from vitbench.transfer.data import load_splits
from vitbench.transfer.sources import NPZ_READ_CHUNK, read_npz

FEWSHOT = ("fewshot", "-m", "ViT-Nano/4", "--objective", "none", "-r", "8", "--classes", "", "--shots", "1",
           "--seeds", "1", "--l2-reg", "1", "--threads", "1")



# ---------------------------------------------------------------------------------------------------------------
# TFDS: feature classes named in the metadata

TFDS_NAME = "vitbench_sec"
IMAGE_CLASS = "tensorflow_datasets.core.features.image_feature.Image"


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    """A legitimate prepared TFDS dataset (2 classes, train and test), as `tfds build` writes it."""
    if not has_tfds():
        pytest.skip("tensorflow-datasets is not installed")
    from data_formats import write_tfds

    x, y = digits_images(4, classes=2)
    test = np.concatenate([np.flatnonzero(y == c)[:1] for c in range(2)])
    train = np.setdiff1d(np.arange(len(y)), test)
    return write_tfds(tmp_path_factory.mktemp("tfds") / "data", TFDS_NAME,
                      {"train": (x[train], y[train]), "test": (x[test], y[test])}, ["0", "1"])


@pytest.fixture
def payload(tmp_path, monkeypatch):
    """(module name, marker): a module on sys.path that creates `marker` when imported (a fresh name per test,
    so no earlier import is cached)."""
    name = f"vitbench_sec_payload_{uuid.uuid4().hex}"
    marker = tmp_path / "PWNED"
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    monkeypatch.syspath_prepend(str(code))
    yield name, marker
    sys.modules.pop(name, None)


def _poisoned(tfds_dir, tmp_path, where: str, cls: str):
    """A copy of the legitimate dataset whose image feature is of class `cls`, written `where`."""
    root = tmp_path / "data"
    shutil.copytree(tfds_dir, root)
    version = root / TFDS_NAME / "1.0.0"
    features = json.loads((version / "features.json").read_text())
    image = features["featuresDict"]["features"]["image"]
    if where == "features.json":  # the reviewer's form: the proto's JSON, as TFDS writes it
        image["pythonClassName"] = cls
    elif where == "features.json python_class_name":  # the proto field's own name, which protobuf also parses
        del image["pythonClassName"]
        image["python_class_name"] = cls
    elif where == "features.json legacy":  # the legacy {type, content} form FeatureConnector.from_json reads
        features = {"type": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                    "content": {"image": {"type": cls, "content": {"shape": [None, None, 3], "dtype": "uint8"}},
                                "label": {"type": "tensorflow_datasets.core.features.class_label_feature."
                                          "ClassLabel", "content": {"num_classes": 2}}}}
    elif where == "features.json nested json":  # a FeaturesDict as a jsonFeature: its JSON string's features
        features["featuresDict"]["features"]["image"] = {
            "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
            "jsonFeature": {"json": json.dumps({"inner": {"type": cls, "content": {}}})}}
    if where.startswith("features.json"):
        (version / "features.json").write_text(json.dumps(features))
    else:  # dataset_info.json's own `features`, which DatasetInfo.from_proto rebuilds
        info = json.loads((version / "dataset_info.json").read_text())
        image["pythonClassName"] = cls
        info["features"] = features
        (version / "dataset_info.json").write_text(json.dumps(info))
    return root


def test_the_payload_is_live_so_the_refusal_tests_mean_something(payload):
    name, marker = payload
    __import__(name)
    assert marker.read_text() == "ran"


@NEEDS_TFDS
@pytest.mark.parametrize("where", ["features.json", "features.json python_class_name", "features.json legacy",
                                   "features.json nested json", "dataset_info.json"])
def test_a_tfds_feature_class_from_outside_tensorflow_datasets_is_refused_never_imported(
        tfds_dir, tmp_path, payload, where):
    """tensorflow-datasets imports the module of a feature class it does not know (cls_from_name): the metadata
    is read with json first, and any class but tensorflow-datasets' own is refused, naming the file and it."""
    name, marker = payload
    root = _poisoned(tfds_dir, tmp_path, where, f"{name}.Image")
    with pytest.raises(ConfigError) as e:
        load_splits({"name": "tfds", "path": str(root), "tfds_name": TFDS_NAME})
    assert not marker.exists() and name not in sys.modules
    msg = str(e.value)
    assert e.value.exit_code == 2
    assert str(root / TFDS_NAME / "1.0.0" / where.split()[0]) in msg and f"{name}.Image" in msg
    assert IMAGE_CLASS.rsplit(".", 2)[1] in msg  # the allowed classes are listed (image_feature.Image, ...)


@NEEDS_TFDS
def test_the_cli_refuses_the_reviewers_tfds_dataset_exit_2_payload_not_run(tfds_dir, tmp_path, payload, cli):
    name, marker = payload
    root = _poisoned(tfds_dir, tmp_path, "features.json", f"{name}.Image")
    r = cli(*FEWSHOT, "--data", "tfds", "--data-path", root)  # the name left out: the one dataset there
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "features.json" in r.output and f"{name}.Image" in r.output
    assert not marker.exists()


@NEEDS_TFDS
def test_a_long_feature_class_name_is_clipped_in_the_message(tfds_dir, tmp_path):
    root = _poisoned(tfds_dir, tmp_path, "features.json", "x" * 100_000 + ".Image")
    with pytest.raises(ConfigError) as e:
        load_splits({"name": "tfds", "path": str(root), "tfds_name": TFDS_NAME})
    assert len(str(e.value)) < 3000


@NEEDS_TFDS
@pytest.mark.parametrize("name", ["huggingface:mnist", f"{TFDS_NAME}/a=1", f"{TFDS_NAME}/..:1.0.0", "../x"])
def test_a_tfds_name_that_loads_from_elsewhere_is_refused_before_tfds_builder(tfds_dir, name, monkeypatch):
    """A namespace (huggingface:, a community one) or builder arguments make tfds.builder load a builder from
    somewhere other than the data_dir's files; a config of dots leaves NAME's folder."""
    import tensorflow_datasets as tfds

    def builder(*a, **k):
        raise AssertionError("tfds.builder called")

    monkeypatch.setattr(tfds, "builder", builder)
    with pytest.raises(ConfigError, match="NAME\\[/CONFIG\\]\\[:VERSION\\]"):
        load_splits({"name": "tfds", "path": str(tfds_dir), "tfds_name": name})


@NEEDS_TFDS
def test_a_legitimate_tfds_dataset_still_reads_and_decodes(tfds_dir):
    s = load_splits({"name": "tfds", "path": str(tfds_dir), "tfds_name": TFDS_NAME})
    assert len(s.test) == 2 and sorted(set(s.test.labels.tolist())) == [0, 1]
    x, _ = s.train.batch(np.arange(len(s.train)), 8)  # decodes through TfdsPool.source (checked again there)
    assert np.isfinite(np.asarray(x)).all()


# ---------------------------------------------------------------------------------------------------------------
# npz: declared and actual sizes

def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _small_arrays():
    x, y = digits_images(3, classes=2)
    return {"x": x, "y": y}


def _declare(data: bytes, member: str, size: int) -> bytes:
    """The zip `data` with `member`'s uncompressed size set to `size` in its local and central headers."""
    out, name = bytearray(data), member.encode()
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        name_at = 30 if sig == b"PK\x03\x04" else 46
        i = out.find(sig)
        while out[i + name_at:i + name_at + len(name)] != name:
            i = out.find(sig, i + 1)
            assert i >= 0, member
        out[i + at:i + at + 4] = struct.pack("<I", size)
    return bytes(out)


def _with_member(data: bytes, member: str, content_chunks, declared: int) -> bytes:
    """The zip `data` plus a deflated `member` (written chunk by chunk) that declares `declared` bytes."""
    buf = io.BytesIO(data)
    with zipfile.ZipFile(buf, "a", compression=zipfile.ZIP_DEFLATED) as z, z.open(member, "w") as f:
        for chunk in content_chunks:
            f.write(chunk)
    return _declare(buf.getvalue(), member, declared)


def _read(path):
    return read_npz(DataConfig(name="npz", path=str(path)))


def test_an_npz_declaring_more_than_the_memory_budget_is_refused_before_any_member_is_read(tmp_path,
                                                                                           monkeypatch):
    """A zip bomb: 2 MB of zeros in a few kB. Under a 1 MiB budget it is refused from the zip's directory alone,
    naming the file, the array and the budget; numpy never reads an array."""
    path = tmp_path / "bomb.npz"
    path.write_bytes(_npz(x=np.zeros((700, 32, 32, 3), np.uint8), y=np.arange(700) % 2))
    assert path.stat().st_size < 2**16
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", str(2**-10))  # 1 MiB

    def read_array(*a, **k):
        raise AssertionError("an array was read")

    monkeypatch.setattr(np.lib.format, "read_array", read_array)
    with pytest.raises(ConfigError) as e:
        _read(path)
    assert str(path) in str(e.value) and "'x'" in str(e.value) and "2,150,528" in str(e.value)
    assert "memory budget of 1 MiB" in str(e.value)


def test_the_cli_refuses_an_npz_bomb_exit_2(tmp_path, monkeypatch, cli):
    path = tmp_path / "bomb.npz"
    path.write_bytes(_npz(x=np.zeros((700, 32, 32, 3), np.uint8), y=np.arange(700) % 2))
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", str(2**-10))
    r = cli(*FEWSHOT, "--data", "npz", "--data-path", path)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "bomb.npz" in r.output and "'x'" in r.output and "memory budget" in r.output


INFLATED = 48 * 2**20  # what the crafted members really inflate to
# What a read may hold at once: NPZ_READ_CHUNK in zipfile's output, again in the bytes gathered from it and once
# more as numpy's copy, twice over for headroom; the small arrays (a few kB) fit in it. The old reads held
# INFLATED (zipfile inflated as much as the read asked for before cutting it to the declared size).
HELD = 6 * NPZ_READ_CHUNK


def _peak(call) -> int:
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_member_inflating_past_its_declared_size_is_never_inflated_past_it(tmp_path):
    """A member that is no array, declaring 64 kB but inflating to 48 MiB: numpy.load reads it whole (zipfile
    inflating all 48 MiB in one call before cutting them to 64 kB). It is read as far as its magic only (never
    used), and the arrays load."""
    path = tmp_path / "inflates.npz"
    path.write_bytes(_with_member(_npz(**_small_arrays()), "notes.txt", [bytes(2**20)] * (INFLATED >> 20), 2**16))
    raw = []
    peak = _peak(lambda: raw.append(_read(path)))
    assert peak < HELD, f"{peak:,} bytes held"
    assert len(raw[0].labels) == 6


def test_an_npy_header_length_past_the_declared_size_reads_no_further(tmp_path):
    """A version-2.0 header declaring a 2 GiB header in a member declaring 64 kB that inflates to 48 MiB: refused
    as unreadable, having inflated no more than the declared bytes (numpy's own read asks zipfile for 2 GiB, which
    inflates all 48 MiB in one call)."""
    head = b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31)
    path = tmp_path / "header.npz"
    path.write_bytes(_with_member(_npz(y=np.arange(6) % 2), "x.npy",
                                  [head] + [bytes(2**20)] * (INFLATED >> 20), 2**16))
    peak = _peak(lambda: pytest.raises(ConfigError, _read, path))
    assert peak < HELD, f"{peak:,} bytes held"
    with pytest.raises(ConfigError, match="not a readable .npz"):
        _read(path)


def test_an_npy_header_version_numpy_reads_only_privately_is_refused(tmp_path):
    x = io.BytesIO()
    np.save(x, np.zeros((2, 8, 8, 3), np.uint8))
    v1 = x.getvalue()  # magic, version 1.0, a 2-byte header length, the header, the data
    # 3.0: 2.0's layout (a 4-byte header length) in UTF-8; numpy writes it only for non-latin-1 field names
    v3 = v1[:6] + b"\x03\x00" + struct.pack("<I", struct.unpack("<H", v1[8:10])[0]) + v1[10:]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", v3)
        y = io.BytesIO()
        np.save(y, np.arange(2))
        z.writestr("y.npy", y.getvalue())
    (tmp_path / "v3.npz").write_bytes(buf.getvalue())
    with pytest.raises(ConfigError, match="'x' has .npy header version 3.0"):
        _read(tmp_path / "v3.npz")


def test_an_npy_file_whose_header_declares_terabytes_is_not_allocated(tmp_path):
    """An .npy given as the .npz (one array, no names) whose header declares 19 TB over 100 bytes: mapped,
    not read, so refused as unreadable instead of numpy allocating the declared array."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False,
                                                  "shape": (10**11, 8, 8, 3)})
    path = tmp_path / "lying.npz"
    path.write_bytes(header.getvalue() + bytes(100))
    with pytest.raises(ConfigError, match="not a readable .npz"):
        _read(path)


def test_a_legitimate_npz_still_reads_compressed_or_not(tmp_path):
    arrays = _small_arrays()
    for name, save in (("plain.npz", np.savez), ("deflated.npz", np.savez_compressed)):
        save(tmp_path / name, **arrays)
        raw = _read(tmp_path / name)
        np.testing.assert_array_equal(raw.labels, arrays["y"])


@NEEDS_TFDS
@pytest.mark.parametrize("template", ["../../outside-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}", "/etc/{SPLIT}",
                                      "sub/{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"])
def test_a_tfds_shard_template_that_leaves_the_dataset_folder_is_refused(tfds_dir, tmp_path, template):
    """tensorflow-datasets joins a split's filepathTemplate to the version folder: '..', a separator or an
    absolute path would make it read files elsewhere. Refused from the metadata, naming the file."""
    root = tmp_path / "data"
    shutil.copytree(tfds_dir, root)
    info_path = root / TFDS_NAME / "1.0.0" / "dataset_info.json"
    info = json.loads(info_path.read_text())
    info["splits"][0]["filepathTemplate"] = template
    info_path.write_text(json.dumps(info))
    with pytest.raises(ConfigError, match="shard file template .* leaves the dataset's folder") as e:
        load_splits({"name": "tfds", "path": str(root), "tfds_name": TFDS_NAME})
    assert str(info_path) in str(e.value) and e.value.exit_code == 2
