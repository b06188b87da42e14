"""Index-addressable image pools: the images of a source, decoded one at a time, on demand.

A pool is what a source (vitbench.transfer.sources) gives instead of one resident array, so a dataset of any
size costs the memory of a batch: `len(pool)`, `pool.decode(i)` -> one image (H, W, C) uint8 in [0, 255] or
float32 in [0, 1], C = 1 or 3, and `pool.origin(i)` (the file that holds image i, for messages), and for a
streamed pool `pool.encoded(i)` (the encoded image: its bytes or its file, what `decode` decodes and
`check_image` verifies). Labels never
need a decode: a source reads them from the layout (folder names, `.cls` members, a label column) beside the pool.

`images_at` turns indices into one preprocessed batch (vitbench.transfer.preprocess: the paper's resize and
scaling), the same on every backend. A file that does not decode is a `CorruptImage` naming it: a ConfigError
(exit 2), or, where the user asked to skip corrupt files, a dropped row counted in `Skipped`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from vitbench.errors import ConfigError
from vitbench.transfer import png
from vitbench.transfer.preprocess import preprocess


class CorruptImage(ConfigError):
    """A file of the dataset that cannot be decoded as an image (truncated, not an image, unreadable)."""

    def __init__(self, origin: str, reason: str):
        super().__init__(f"{origin}: cannot be read as an image ({reason}); fix or remove the file, or pass "
                         "--skip-corrupt (study field data.skip_corrupt) to skip such files and count them")
        self.origin, self.reason = origin, reason


class Pool(Protocol):
    """Images addressable by index, decoded on demand (see the module docstring)."""

    resident: bool  # True: the images are one in-memory array already (nothing to stream)

    def __len__(self) -> int: ...

    def decode(self, i: int) -> np.ndarray: ...

    def origin(self, i: int) -> str: ...


class StreamedPool(Pool, Protocol):
    """A pool of encoded images (every pool that is not resident)."""

    def encoded(self, i: int) -> bytes | Path: ...


@dataclass
class ArrayPool:
    """Images already in memory (the bundled and array sources: digits, synthetic, cifar, npz)."""

    images: np.ndarray
    resident: bool = True

    def __len__(self) -> int:
        return len(self.images)

    def decode(self, i: int) -> np.ndarray:
        return self.images[i]

    def origin(self, i: int) -> str:
        return f"image {i}"


def regular_file(p: Path) -> bool:
    """Whether `p` is a regular file (links followed): not a directory, FIFO, socket or device, which a reader
    opening it could block on for ever (a FIFO without a writer), nor missing or past the name-length limit."""
    import stat

    try:
        return stat.S_ISREG(p.stat().st_mode)
    except OSError:
        return False


def _opened(data: bytes | Path):
    import io

    from PIL import Image

    if isinstance(data, Path) and not regular_file(data) and data.exists():  # (a missing one: PIL's own error)
        raise OSError("not a regular file (a directory, FIFO, socket or device): not opened")
    return Image.open(data if isinstance(data, Path) else io.BytesIO(data))


def _png_whole(data: bytes | Path) -> None:
    """png.PngError where a PNG's image data is short of what its header declares (Pillow decodes the rows
    missing as black, without a word: vitbench.transfer.png)."""
    problem = png.short_data(data.read_bytes() if isinstance(data, Path) else data)
    if problem:
        raise png.PngError(problem)


def _refusal(e: Exception) -> str:
    """Why PIL would not decode a file, for CorruptImage. Its pixel-count guard (DecompressionBombError: more
    than 2 x Image.MAX_IMAGE_PIXELS, ~179 M pixels, refused by `Image.open` before any pixel is read) says so.
    PIL names bytes it cannot identify by their buffer's repr (`<_io.BytesIO object at 0x7f...>`), which names
    nothing: left out (the message names the member or row), as is the file a path's message repeats."""
    import re

    from PIL import Image

    if isinstance(e, Image.DecompressionBombError):
        return f"{str(e).rstrip('.')}: refused by PIL's decompression-bomb guard (Image.MAX_IMAGE_PIXELS)"
    if isinstance(e, Image.UnidentifiedImageError):
        return "cannot identify image file: empty, not an image, or of a format PIL does not read"
    return re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "", str(e)) or type(e).__name__


# Modes whose samples do not fit uint8 (PIL's `convert("RGB")` would clip them to 0..255, not scale them): decoded
# to float32 in [0, 1] from their own range instead (Pillow's modes: pillow.readthedocs.io, "Concepts: Modes").
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")  # unsigned 16-bit: 0..65535
INT32_MODE, FLOAT_MODE = "I", "F"  # 32-bit signed integer; 32-bit float


def _deep_values(a: np.ndarray, mode: str, fmt: str | None, origin: str) -> np.ndarray:
    """A 16-bit, 32-bit integer or float image's samples as float32 (H, W, 1) in [0, 1]: 16-bit over 65535 (a PNG
    opened in mode I is 16-bit grey too: PNG has no deeper samples); a float image as it is, when its values lie
    in [0, 1]. Anything else has no known scale: CorruptImage naming the file and its range."""
    if mode in SIXTEEN_BIT_MODES or (mode == INT32_MODE and fmt == "PNG"):
        if a.size and (a.min() < 0 or a.max() > 65535):
            raise CorruptImage(origin, f"16-bit samples outside 0..65535 ({a.min()}..{a.max()})")
        return (a.astype(np.float32) / 65535.0)[..., None]
    if mode == FLOAT_MODE:
        finite = bool(np.isfinite(a).all())
        if not finite or a.size and (a.min() < 0 or a.max() > 1):
            got = "non-finite values" if not finite else f"values {a.min():g}..{a.max():g}"
            raise CorruptImage(origin, f"a float image ({mode}) with {got}; float images are read as values in "
                               "[0, 1]: store 8- or 16-bit integers instead")
        return a.astype(np.float32)[..., None]
    raise CorruptImage(origin, f"{fmt or 'an'} image of 32-bit integer samples (mode {mode}): their scale is not "
                       "known; store 8- or 16-bit samples instead")


def decode_bytes(data: bytes | Path, origin: str) -> np.ndarray:
    """An encoded image (PNG, JPEG, any format PIL opens: a file path or its bytes) at the values it holds: uint8
    RGB (H, W, 3) for 8-bit modes (grey, palette, CMYK, YCbCr, LAB, HSV converted by PIL; alpha dropped, as the
    paper's `decode_image(channels=3)`), float32 (H, W, 1) in [0, 1] for 16-bit grey and [0, 1] float images
    (`_deep_values`), float32 (H, W, 3) in [0, 1] for 16-bit RGB/RGBA PNGs (which Pillow reads as 8-bit:
    decoded by `png` instead). CorruptImage naming `origin` when it does not decode whole (PIL raises on a
    truncated file once the pixels are loaded; a PNG's short image data is vitbench's own check), when PIL's
    pixel-count guard refuses it, or when its values have no known scale."""
    try:
        with _opened(data) as im:
            im.load()
            mode, fmt = im.mode, im.format
            if fmt == "PNG":
                raw = data.read_bytes() if isinstance(data, Path) else data
                if mode in ("RGB", "RGBA") and png.is_deep_colour(raw[:26]):
                    return png.decode(raw)  # (its own size check)
                _png_whole(raw)
            if mode in (*SIXTEEN_BIT_MODES, INT32_MODE, FLOAT_MODE):
                deep = np.asarray(im)
            else:
                return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a hostile file makes PIL raise OSError, ValueError, SyntaxError,
        # EOFError, struct.error, IndexError, DecompressionBombError...: each is this file's refusal, named
        raise CorruptImage(origin, _refusal(e)) from None
    return _deep_values(deep, mode, fmt, origin)


JPEG_CHECK_SCALE = 8  # JPEG's DCT decodes at 1/8 scale (PIL's draft mode): every byte read, ~1/64 of the pixels


def check_image(data: bytes | Path, origin: str) -> None:
    """CorruptImage naming `origin` unless `data` is a whole image, checked cheaper than a decode: a PNG's chunks
    and their CRCs read to the end (PIL's verify) and its image data inflated to the size its header declares
    (png.short_data, not unfiltered), a JPEG decoded in draft mode at 1/8 scale (a truncated or
    damaged entropy-coded stream still fails), any other format decoded. PIL's pixel-count guard refuses as in
    `decode_bytes`, and so do the values of a deep image (`_deep_values`) decoded here whole."""
    deep = None
    try:
        with _opened(data) as im:
            if im.format == "PNG":
                im.verify()
                _png_whole(data)
            elif im.format == "JPEG":
                im.draft("RGB", (max(1, im.width // JPEG_CHECK_SCALE), max(1, im.height // JPEG_CHECK_SCALE)))
                im.load()
            else:
                im.load()
                if im.mode in (*SIXTEEN_BIT_MODES, INT32_MODE, FLOAT_MODE):
                    deep = (np.asarray(im), im.mode, im.format)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - PIL's many decode errors, as in decode_bytes
        raise CorruptImage(origin, _refusal(e)) from None
    if deep is not None:
        _deep_values(*deep, origin)


@dataclass
class FilePool:
    """One image file per index (the `folder` source)."""

    files: list[str]
    resident: bool = False

    def __len__(self) -> int:
        return len(self.files)

    def encoded(self, i: int) -> Path:
        return Path(self.files[i])

    def decode(self, i: int) -> np.ndarray:
        return decode_bytes(self.encoded(i), self.files[i])

    def origin(self, i: int) -> str:
        return self.files[i]


@dataclass
class Skipped:
    """Corrupt files skipped so far (`--skip-corrupt`): origin -> reason. Shared by the splits of one source."""

    allowed: bool = False
    files: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.files)


@dataclass
class Batch:
    """A preprocessed batch: images float32 (B', r, r, 3) in [-1, 1], the positions (into the requested
    indices) they came from (B' < B when corrupt files were skipped), and the files that failed."""

    images: np.ndarray
    kept: np.ndarray
    failed: dict[str, str]


def images_at(pool: Pool, idx: np.ndarray, resolution: int, skip_corrupt: bool = False) -> Batch:
    """Decode and preprocess `pool`'s images at `idx` (a resident pool: one vectorised preprocess, as before
    streaming existed). Same-size images are preprocessed together, so a file pool gives the very numbers an
    array of the same images gives; an odd size is resized on its own, straight to `resolution`."""
    idx = np.asarray(idx, dtype=np.int64)
    if pool.resident:
        return Batch(preprocess(pool.images[idx], resolution), np.arange(len(idx)), {})
    decoded, kept, failed = [], [], {}
    for pos, i in enumerate(idx):
        try:
            decoded.append(pool.decode(int(i)))
            kept.append(pos)
        except CorruptImage as e:
            if not skip_corrupt:
                raise
            failed[e.origin] = e.reason
    if not decoded:
        return Batch(np.zeros((0, resolution, resolution, 3), np.float32), np.zeros(0, np.int64), failed)
    out = np.empty((len(decoded), resolution, resolution, 3), np.float32)
    groups: dict[tuple, list[int]] = {}
    for j, im in enumerate(decoded):
        groups.setdefault((im.shape, im.dtype.str), []).append(j)
    for js in groups.values():
        out[js] = preprocess(np.stack([decoded[j] for j in js]), resolution)
    return Batch(out, np.asarray(kept, np.int64), failed)
