"""Hostile data sources for tests/test_hostile.py (issue 50), generated here (nothing downloaded): tiny digits in
every layout, spoiled one way each (corrupt splits, one class, a split missing, a decompression bomb, images of
deep modes, labels of 10**9, malformed `datasets` metadata). `hostile_data(root)` writes them all and returns
{name: path} for the rows' `{name}` placeholders.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np

from data_formats import (_add, digits_images, png_bytes, write_folder, write_hf_arrow, write_hf_parquet,
                          write_shards)

CLASSES = 3


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(side: int = 20_000) -> bytes:
    """A PNG whose header declares side x side grey pixels (4e8 at the default: over PIL's decompression-bomb
    limit, 2 x Image.MAX_IMAGE_PIXELS = 178,956,970) in a few dozen bytes: refused by `Image.open` on its
    header, before any pixel is read."""
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)  # width, height, 8-bit, greyscale
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\0" * 16))
            + png_chunk(b"IEND", b""))


def encoded(image, fmt: str = "PNG", **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


def png16_rgb(samples: np.ndarray, filters: tuple[int, ...] = (0,), interlace: bool = False) -> bytes:
    """A 16-bit RGB (C = 3) or RGBA (C = 4) PNG of `samples` (H, W, C) uint16, written by hand (PIL writes no
    16-bit colour): row k filtered with filters[k % len(filters)] (0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth, the
    PNG spec's definitions, applied here pixel by pixel), Adam7-interlaced if asked."""
    h, w, c = samples.shape
    bpp = 2 * c
    passes = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)) \
        if interlace else ((0, 0, 1, 1),)
    data, k = b"", 0
    for r0, c0, dr, dc in passes:
        sub = samples[r0::dr, c0::dc]
        if sub.size == 0:
            continue
        prior = [0] * (sub.shape[1] * bpp)
        for row in sub:
            raw = list(row.astype(">u2").tobytes())
            f = filters[k % len(filters)]
            k += 1
            out = []
            for x, v in enumerate(raw):
                a = raw[x - bpp] if x >= bpp else 0
                b, cc = prior[x], prior[x - bpp] if x >= bpp else 0
                p = a + b - cc
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
                paeth = a if pa <= pb and pa <= pc else (b if pb <= pc else cc)
                out.append((v - (0, a, b, (a + b) // 2, paeth)[f]) % 256)
            data += bytes([f] + out)
            prior = raw
    ctype = {3: 2, 4: 6}[c]
    header = struct.pack(">IIBBBBB", w, h, 16, ctype, 0, 0, int(interlace))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
            + png_chunk(b"IDAT", zlib.compress(data)) + png_chunk(b"IEND", b""))


def _spoil(paths, data: bytes = b"not an image") -> None:
    for p in paths:
        p.write_bytes(data)


def _split_folder(root: Path, x, y, train, test) -> Path:
    write_folder(root, "train", x[train], y[train])
    write_folder(root, "test", x[test], y[test])
    return root


def hostile_data(root: Path) -> dict[str, object]:
    from PIL import Image

    x, y = digits_images(6, classes=CLASSES)  # 6 per class, 8 x 8 RGB
    test = np.concatenate([np.flatnonzero(y == c)[:2] for c in range(CLASSES)])
    train = np.setdiff1d(np.arange(len(y)), test)
    out: dict[str, object] = {}

    def folder(name: str) -> Path:
        out[name] = _split_folder(root / name, x, y, train, test)
        return out[name]

    # ---- item 2: corrupt splits, one class ----------------------------------------------------------------------
    _spoil((folder("corrupt_test") / "test").rglob("*.png"))
    _spoil((folder("corrupt_train") / "train").rglob("*.png"))
    _spoil((folder("corrupt_class") / "train" / "0").glob("*.png"))  # class 0: 4 training images, none readable
    one_bad = folder("one_bad_test")
    _spoil([sorted((one_bad / "test" / "1").glob("*.png"))[0]])
    write_folder(root / "all_corrupt", "", x, y)
    _spoil((root / "all_corrupt").rglob("*.png"))
    out["all_corrupt"] = root / "all_corrupt"
    write_folder(root / "one_class", "", x[y == 0], y[y == 0])
    out["one_class"] = root / "one_class"
    x5, y5 = digits_images(4, classes=5)
    write_folder(root / "five_classes", "", x5, y5)
    out["five_classes"] = root / "five_classes"
    # ---- item 3: a split missing beside the other ---------------------------------------------------------------
    write_folder(root / "train_only", "train", x[train], y[train])
    out["train_only"] = root / "train_only"
    write_folder(root / "test_only", "test", x[test], y[test])
    out["test_only"] = root / "test_only"
    shards = root / "shards"
    write_shards(shards, "train", x[train], y[train], per_shard=4)  # train-000000..000002
    write_shards(shards, "test", x[test], y[test], per_shard=100)  # test-000000
    out["shards"] = shards
    write_shards(root / "test_shards_only", "test", x[test], y[test], per_shard=100)
    out["test_shards_only"] = root / "test_shards_only"
    # ---- item 4: images PIL refuses or decodes in other modes ---------------------------------------------------
    bomb = folder("bomb_test")
    out["bomb"] = sorted((bomb / "test" / "2").glob("*.png"))[0]
    out["bomb"].write_bytes(bomb_png())
    deep = folder("deep_modes")
    grey = (x[:, :, :, 0].astype(np.uint16) * 257)  # the 8-bit grey levels as 16-bit samples
    for i, p in enumerate(sorted((deep / "train").rglob("*.png"))[:6]):
        k = int(train[i]) if i < len(train) else 0
        im = [Image.fromarray(grey[k]),  # I;16
              Image.fromarray(x[k]).convert("P"), Image.fromarray(x[k]).convert("LA"),
              Image.fromarray(x[k]).convert("1"), Image.fromarray(x[k]).convert("RGBA"),
              Image.fromarray(x[k]).convert("CMYK")][i]
        p.write_bytes(encoded(im, "JPEG" if im.mode == "CMYK" else "PNG"))  # named .png, read by content
    fifo = folder("fifo_image")  # a FIFO named like an image: opening it would wait for a writer for ever
    out["fifo"] = sorted((fifo / "test" / "1").glob("*.png"))[0]
    out["fifo"].unlink()
    os.mkfifo(out["fifo"])
    shutil.copytree(shards, root / "fifo_shards")
    os.mkfifo(root / "fifo_shards" / "train-000009.tar")
    out["fifo_shards"] = root / "fifo_shards"
    os.mkfifo(root / "fifo.npz")
    out["fifo_npz"] = root / "fifo.npz"
    wide = folder("float_out_of_range")
    out["float_image"] = sorted((wide / "test" / "0").glob("*.png"))[0]
    out["float_image"].write_bytes(encoded(Image.fromarray(np.full((8, 8), 2.5, np.float32)), "TIFF"))
    # ---- item 6: labels of 10**9 --------------------------------------------------------------------------------
    write_shards(root / "huge_label_shards", "train", x[train], np.where(np.arange(len(train)) == 1, 10**9,
                                                                          y[train]), per_shard=100)
    out["huge_label_shards"] = root / "huge_label_shards"
    big = root / "big_label_shards"
    big.mkdir()
    with tarfile.open(big / "train-000000.tar", "w") as tf:  # a .cls member of a megabyte: no label, not read
        for i in range(len(train)):
            _add(tf, f"{i:05d}.png", png_bytes(x[train[i]]))
            _add(tf, f"{i:05d}.cls", b" " * 10**6 + b"1" if i == 2 else str(int(y[train[i]])).encode())
    out["big_label_shards"] = big
    npz = {"huge_label": dict(x=x, y=np.where(np.arange(len(y)) == 3, 10**9, y)),
           "negative_label": dict(x=x, y=np.where(np.arange(len(y)) == 3, -1, y)),
           "mixed_names": dict(x=x[train], y=y[train], x_test=x[test], y_test=y[test]),  # test beside x, y
           "sparse_labels": dict(x=x, y=y * 2)}  # classes 0, 2, 4: class 1 has no image
    for name, arrays in npz.items():
        np.savez(root / f"{name}.npz", **arrays)
        out[f"npz_{name}"] = root / f"{name}.npz"
    np.save(root / "one_array.npy", x)  # an .npy renamed: one array, no names
    (root / "one_array.npy").rename(root / "one_array.npz")
    out["npz_one_array"] = root / "one_array.npz"
    out["npz_lying_header"] = _lying_npz(root / "lying_header.npz")
    (root / "zip_magic_only.npz").write_bytes(b"PK\x03\x04garbage")  # a zip's magic, then no archive
    out["npz_zip_magic_only"] = root / "zip_magic_only.npz"
    _hf(root, x, y, train, test, out)
    (root / "bad_date.yaml").write_text("name: bad-date\ndefaults:\n  seed: 2020-13-45\n")
    out["study_bad_date"] = root / "bad_date.yaml"
    return out


def _lying_npz(path: Path) -> Path:
    """An .npz whose `x` header declares (10**12, 8, 8, 3) uint8 (192 TB) over 100 bytes of data: numpy would
    allocate the declared array before finding the data short."""
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False,
                                                  "shape": (10**12, 8, 8, 3)})
    labels = io.BytesIO()
    np.save(labels, np.zeros(10, np.int64))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", header.getvalue() + b"\0" * 100)
        z.writestr("y.npy", labels.getvalue())
    return path


def _hf(root: Path, x, y, train, test, out: dict) -> None:
    names = [str(c) for c in range(CLASSES)]

    def arrow(name: str, splits=("train", "test")) -> Path:
        for s in splits:
            idx = train if s == "train" else test
            write_hf_arrow(root / name, s, x[idx], y[idx], names)
        out[name] = root / name
        return root / name

    (arrow("hf_bad_dict") / "dataset_dict.json").write_text('{"splits": ["train", "test"')  # cut short
    (arrow("hf_dict_list") / "dataset_dict.json").write_text('["train", "test"]')
    (arrow("hf_dict_splits") / "dataset_dict.json").write_text('{"splits": "train"}')
    shutil.rmtree(arrow("hf_missing_split") / "test")
    (root / "hf_missing_split" / "test").mkdir()  # declared, present, and empty
    (arrow("hf_bad_info") / "train" / "dataset_info.json").write_text("{features: Image}")
    (arrow("hf_info_list") / "train" / "dataset_info.json").write_text('{"features": ["img", "fine_label"]}')
    info = arrow("hf_bad_names") / "train" / "dataset_info.json"
    doc = json.loads(info.read_text())
    doc["features"]["fine_label"]["names"] = 5
    info.write_text(json.dumps(doc))
    arrow("hf_train_only", ("train",))
    arrow("hf_split")
    write_hf_parquet(root / "hf_test_parquet", "test", x[test], y[test], names)
    out["hf_test_parquet"] = root / "hf_test_parquet"
    _hf_plain_labels(root / "hf_huge_label" / "train.parquet", x, np.where(np.arange(len(y)) == 2, 10**9, y))
    out["hf_huge_label"] = root / "hf_huge_label"


def _hf_plain_labels(path: Path, x, y) -> None:
    """A parquet of an image column and an integer `label` column, no `datasets` features (no ClassLabel)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"image": pa.array([{"bytes": png_bytes(im), "path": None} for im in x]),
                             "label": pa.array(y, pa.int64())}), path)
