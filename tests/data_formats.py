"""Test fixtures: the same labelled images written in every format vitbench reads (nothing downloaded).

`digits_images` gives uint8 RGB images of scikit-learn's bundled digits; `write_*` store a train and a test split
(images in class order, named `<class>/<index>`) so every format lists the same images in the same order.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest


def has_tfds() -> bool:
    """Is tensorflow-datasets (the optional `tfds` extra) importable here?"""
    try:
        import tensorflow_datasets  # noqa: F401
    except ImportError:
        return False
    return True


NEEDS_TFDS = pytest.mark.skipif(not has_tfds(), reason="tensorflow-datasets is not installed "
                                "(pip install 'vitbench[tfds]'; CI installs it through [all])")


def digits_images(per_class: int, classes: int = 10, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, size, size, 3), labels) in class order: `per_class` digits of each class (grey levels
    0..16 scaled to 0..255; upscaled by pixel repetition when `size` > 8)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = np.concatenate([np.flatnonzero(d.target == c)[:per_class] for c in range(classes)])
    grey = np.round(d.images[idx] / 16.0 * 255).astype(np.uint8)
    grey = np.kron(grey, np.ones((size // 8, size // 8), np.uint8)) if size > 8 else grey
    return np.repeat(grey[..., None], 3, axis=-1), d.target[idx].astype(np.int64)


def png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def write_folder(root: Path, split: str, images: np.ndarray, labels: np.ndarray) -> None:
    for i, (im, y) in enumerate(zip(images, labels)):
        p = root / split / str(y) / f"{i:05d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(png_bytes(im))


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def write_shards(root: Path, split: str, images: np.ndarray, labels: np.ndarray, per_shard: int,
                 label: bool = True) -> list[Path]:
    """`root/<split>-000000.tar`, ...: webdataset samples `<index>.png` + `<index>.cls`."""
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for s, start in enumerate(range(0, len(images), per_shard)):
        path = root / f"{split}-{s:06d}.tar"
        with tarfile.open(path, "w") as tf:
            for i in range(start, min(start + per_shard, len(images))):
                _add(tf, f"{i:05d}.png", png_bytes(images[i]))
                if label:
                    _add(tf, f"{i:05d}.cls", str(int(labels[i])).encode())
        out.append(path)
    return out


def write_hf_parquet(root: Path, split: str, images: np.ndarray, labels: np.ndarray, names: list[str]) -> Path:
    """A parquet file as `datasets` writes one (`Dataset.to_parquet` / the Hub's layout): an `image` column of
    {bytes, path} structs, a `label` column, the features (Image, ClassLabel) in the schema's 'huggingface'
    metadata."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array([{"bytes": png_bytes(im), "path": None} for im in images], image_type),
                      "label": pa.array(labels, pa.int64())})
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": names}}
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    path = root / "data" / f"{split}-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=16)
    return path


def write_npz(path: Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]) -> Path:
    np.savez(path, x_train=train[0], y_train=train[1], x_test=test[0], y_test=test[1])
    return path


def write_hf_arrow(root: Path, split: str, images: np.ndarray, labels: np.ndarray, names: list[str]) -> Path:
    """A split of a DatasetDict as `Dataset.save_to_disk` lays it out: `root/dataset_dict.json` and
    `root/<split>/data-00000-of-00001.arrow` (an Arrow IPC stream) + `dataset_info.json` (the features) +
    `state.json`."""
    import json

    import pyarrow as pa

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"img": pa.array([{"bytes": png_bytes(im), "path": None} for im in images], image_type),
                      "fine_label": pa.array(labels, pa.int64())})
    d = root / split
    d.mkdir(parents=True, exist_ok=True)
    path = d / "data-00000-of-00001.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=16):
            writer.write_batch(batch)
    features = {"img": {"_type": "Image"}, "fine_label": {"_type": "ClassLabel", "names": names}}
    (d / "dataset_info.json").write_text(json.dumps({"features": features}))
    (d / "state.json").write_text(json.dumps({"_data_files": [{"filename": path.name}]}))
    splits = sorted({*json.loads((root / "dataset_dict.json").read_text())["splits"], split}) \
        if (root / "dataset_dict.json").exists() else [split]
    (root / "dataset_dict.json").write_text(json.dumps({"splits": splits}))
    return path


def write_tfds(data_dir: Path, name: str, splits: dict[str, tuple[np.ndarray, np.ndarray]], names: list[str],
               spoil: dict | None = None) -> Path:
    """A prepared TFDS dataset `data_dir/<name>/1.0.0/` (array_record, as `tfds build --file_format
    array_record` writes it), generated by a `GeneratorBasedBuilder` defined here (nothing downloaded, no
    TensorFlow: the images go in PNG-encoded, as TFDS stores them). Records keep the given order
    (`disable_shuffling`), so the dataset lists the images as every other format does. `spoil`: {(split, index):
    bytes -> bytes} rewrites those images' encoded bytes (a corrupt record). Needs tensorflow-datasets."""
    import tensorflow_datasets as tfds

    with tfds.core.registered.skip_registration():  # a test's builder; read back from its files by name

        class Images(tfds.core.GeneratorBasedBuilder):
            VERSION = tfds.core.Version("1.0.0")

            def _info(self):
                return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(None, None, 3)),
                    "label": tfds.features.ClassLabel(names=names)}), supervised_keys=("image", "label"),
                    disable_shuffling=True)

            def _split_generators(self, dl_manager):
                return {s: self._generate_examples(s, x, y) for s, (x, y) in splits.items()}

            def _generate_examples(self, split, images, labels):
                for i, (im, y) in enumerate(zip(images, labels)):
                    yield i, {"image": (spoil or {}).get((split, i), bytes)(png_bytes(im)), "label": int(y)}

    Images.name = name
    Images(data_dir=str(data_dir), file_format="array_record").download_and_prepare()
    return data_dir
