"""Peak resident memory of `vitbench fewshot` on a small and a large dataset, per format (issue 32's target:
the large run within 1.3x of the small one: memory bounded by the batch, not the dataset).

Generates N RGB PNGs of --px pixels (10 classes: a smooth per-class pattern plus noise, 80 % train / 20 % test)
as a class folder and as webdataset shards (the same images; with `--formats ...,tfds` also as a prepared TFDS
dataset), then runs, each in a fresh process,

    vitbench fewshot -m ViT-Nano/4 --objective none -r 32 --classes '' --data FORMAT --data-path PATH ...

and reads the child's peak RSS (getrusage RUSAGE_CHILDREN ru_maxrss, KiB on Linux) through a wrapper process, so
each figure is that one run's. `--code DIR` runs another checkout (e.g. the main branch before streaming) for
comparison; its folder run reads every image into memory.

    python benchmarks/bench_data_memory.py --sizes 2000,20000,100000 --root /tmp/vb-data
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

CLASSES = 10
TEST_FRACTION = 0.2
TARGET_RATIO = 1.3  # issue 32: peak RSS at 20k (and 100k) images within 1.3x of the 2k-image run


def _image(rng: np.random.Generator, pattern: np.ndarray, px: int) -> bytes:
    import io

    from PIL import Image

    img = np.clip(pattern + rng.normal(0, 12, pattern.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def generate(root: Path, n: int, px: int, per_shard: int = 1000, distinct: int = 50) -> dict[str, Path]:
    """`root/folder-N/{train,test}/<class>/*.png` and `root/shards-N/{train,test}-*.tar` with the same images;
    skipped when already there. Fast at any N: `distinct` PNGs per class are encoded once, the folder's files are
    hard links to them (one inode each, many names) and the shards repeat their bytes, so 100k images cost the
    encoding of 10 x `distinct` (peak RSS does not depend on which pixels a file holds, only on how many files
    a run lists and decodes)."""
    import io
    import os

    folder, shards = root / f"folder-{n}", root / f"shards-{n}"
    done = root / f".done-{n}-{px}"
    if done.exists():
        return {"folder": folder, "webdataset": shards}
    rng = np.random.default_rng(0)
    coarse = rng.uniform(40, 215, size=(CLASSES, 4, 4, 3))
    patterns = np.stack([np.kron(c, np.ones((px // 4, px // 4, 1))) for c in coarse])
    originals = root / f"originals-{px}"
    originals.mkdir(parents=True, exist_ok=True)
    encoded = []  # [class][j] -> (file, bytes)
    for c in range(CLASSES):
        row = []
        for j in range(distinct):
            f = originals / f"c{c}-{j:04d}.png"
            if not f.exists():
                f.write_bytes(_image(rng, patterns[c], px))
            row.append((f, f.read_bytes()))
        encoded.append(row)
    shards.mkdir(parents=True, exist_ok=True)
    n_test = int(n * TEST_FRACTION)
    for split, count in (("train", n - n_test), ("test", n_test)):
        for c in range(CLASSES):
            (folder / split / f"c{c}").mkdir(parents=True, exist_ok=True)
        tf = None
        for i in range(count):
            if i % per_shard == 0:
                if tf is not None:
                    tf.close()
                tf = tarfile.open(shards / f"{split}-{i // per_shard:06d}.tar", "w")
            label = i % CLASSES
            src, data = encoded[label][(i // CLASSES) % distinct]
            path = folder / split / f"c{label}" / f"{i:07d}.png"
            if not path.exists():
                os.link(src, path)
            for name, payload in ((f"{i:07d}.png", data), (f"{i:07d}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
        tf.close()
    done.touch()
    return {"folder": folder, "webdataset": shards}


def generate_tfds(root: Path, n: int, px: int, distinct: int = 50) -> Path:
    """`root/tfds-N/bench_images/1.0.0/`: the folder's images (same order, same bytes) as a prepared TFDS dataset
    (array_record, train + test), written by a GeneratorBasedBuilder (tensorflow-datasets, no TensorFlow)."""
    import tensorflow_datasets as tfds

    data_dir = root / f"tfds-{n}"
    if (data_dir / ".done").exists():
        return data_dir
    generate(root, n, px, distinct=distinct)
    originals = root / f"originals-{px}"
    n_test = int(n * TEST_FRACTION)

    def examples(count: int):
        for i in range(count):
            label = i % CLASSES
            yield i, {"image": (originals / f"c{label}-{(i // CLASSES) % distinct:04d}.png").read_bytes(),
                      "label": label}

    with tfds.core.registered.skip_registration():

        class BenchImages(tfds.core.GeneratorBasedBuilder):
            VERSION = tfds.core.Version("1.0.0")

            def _info(self):
                features = tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(px, px, 3)),
                    "label": tfds.features.ClassLabel(names=[f"c{c}" for c in range(CLASSES)])})
                return tfds.core.DatasetInfo(builder=self, disable_shuffling=True, features=features)

            def _split_generators(self, dl_manager):
                return {"train": self._generate_examples(n - n_test), "test": self._generate_examples(n_test)}

            def _generate_examples(self, count):
                return examples(count)

    # TFDS sorts a split's records by key in memory up to 1 GB, then spills to disk through TensorFlow's file API;
    # without TensorFlow the buffer must hold the split: raised here, for this generator process only (100k
    # images of 128 px: ~3.2 GB)
    from tensorflow_datasets.core import shuffle

    shuffle.MAX_MEM_BUFFER_SIZE = max(shuffle.MAX_MEM_BUFFER_SIZE, 60_000 * n)
    BenchImages(data_dir=str(data_dir), file_format="array_record").download_and_prepare()
    (data_dir / ".done").touch()
    return data_dir


def peak_rss(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float, int, str]:
    """(peak RSS MiB of `cmd` run alone in a wrapper process, wall seconds, exit code, its stdout). `cwd`: not a
    checkout (`python -c` imports from the working directory first, which would shadow --code)."""
    wrapper = ("import resource, subprocess, sys, json; r = subprocess.run(sys.argv[1:], capture_output=True, "
               "text=True); print(json.dumps({'kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
               "'rc': r.returncode, 'out': r.stdout[-20000:], 'err': r.stderr[-2000:]}))")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, env=env, check=True,
                         cwd=cwd)
    wall = time.perf_counter() - t0
    res = json.loads(out.stdout)
    if res["rc"] != 0:
        print(res["err"], file=sys.stderr)
    return res["kib"] / 1024, wall, res["rc"], res["out"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,20000", help="Dataset sizes (images, train + test).")
    ap.add_argument("--px", type=int, default=128, help="Stored image size.")
    ap.add_argument("--distinct", type=int, default=50, help="Distinct images per class (encoded once, then "
                                                             "linked / repeated under N names).")
    ap.add_argument("--formats", default="folder,webdataset", help="Any of folder, webdataset, tfds (needs "
                                                                   "tensorflow-datasets: the [tfds] extra).")
    ap.add_argument("--root", default="/tmp/vitbench-data-bench", help="Where the images are generated.")
    ap.add_argument("--code", default=None, help="Run this checkout's vitbench (PYTHONPATH) instead of the "
                                                 "installed one.")
    ap.add_argument("--workers", type=int, default=0, help="--data-workers")
    ap.add_argument("--json", dest="as_json", action="store_true")
    a = ap.parse_args()
    root = Path(a.root)
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if a.code:
        env["PYTHONPATH"] = a.code
    rows = []
    for n in (int(s) for s in a.sizes.split(",")):
        t0 = time.perf_counter()
        paths = generate(root, n, a.px, distinct=a.distinct)
        if "tfds" in a.formats.split(","):
            paths["tfds"] = generate_tfds(root, n, a.px, distinct=a.distinct)
        print(f"# {n} images ready in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        for fmt in a.formats.split(","):
            cmd = [sys.executable, "-c", "from vitbench.cli import main; main()", "fewshot", "-m", "ViT-Nano/4",
                   "--objective", "none", "-r", "32", "--classes", "", "--shots", "1,5,10,25", "--seeds", "2",
                   "--threads", "1", "--data", fmt, "--data-path", str(paths[fmt]), "--json"]
            if a.workers:
                cmd += ["--data-workers", str(a.workers)]
            mib, wall, rc, out = peak_rss(cmd, env, root)
            metrics = json.loads(out)["metrics"] if rc == 0 else {}
            rows.append({"images": n, "format": fmt, "peak_rss_mib": round(mib, 1), "wall_s": round(wall, 1),
                         "rc": rc, "accuracy": metrics.get("accuracy"),
                         "input_img_per_s": metrics.get("input_img_per_s"),
                         "input_bound_fraction": metrics.get("input_bound_fraction"),
                         "load_avg_1m": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), file=sys.stderr)
    if a.as_json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'format':<11} {'images':>7} {'peak RSS MiB':>13} {'wall s':>7} {'accuracy':>9}  load")
    for r in rows:
        acc = f"{r['accuracy']:.3f}" if r["accuracy"] is not None else f"rc={r['rc']}"
        print(f"{r['format']:<11} {r['images']:>7} {r['peak_rss_mib']:>13.0f} {r['wall_s']:>7.1f} {acc:>9}  "
              f"{r['load_avg_1m']:.1f}")
    for fmt in a.formats.split(","):
        mine = [r for r in rows if r["format"] == fmt and r["rc"] == 0]
        for big in mine[1:]:
            ratio = big["peak_rss_mib"] / mine[0]["peak_rss_mib"]
            verdict = "within" if ratio <= TARGET_RATIO else "ABOVE"
            print(f"{fmt}: {big['images']} vs {mine[0]['images']} images: {ratio:.2f}x peak RSS "
                  f"({verdict} the {TARGET_RATIO}x target)")


if __name__ == "__main__":
    main()
