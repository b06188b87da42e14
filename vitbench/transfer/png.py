"""PNG image data read from the file's own bytes, where Pillow's reading falls short (PNG specification, W3C, 3rd
edition: https://www.w3.org/TR/png-3/):

- **Short image data** (`short_data`): Pillow decodes a PNG whose image data inflates to fewer bytes than its
  header declares without a word, the rows missing black (a 32 x 32 RGB image of 16 rows came back half black;
  Pillow notices it on images of a few dozen pixels only). libpng refuses it ("the zlib stream ending before
  enough pixel data has been produced is an error", image-rs/image-png#619 reading pngrutil.c);
  `pools.decode_bytes` and `pools.check_image` refuse it too.
- **16-bit colour** (`decode`): Pillow opens a 16-bit RGB or RGBA PNG as 8-bit RGB (each sample's high byte), so
  `pools.decode_bytes` decodes those here to float32 (H, W, 3) in [0, 1] (samples over 65535; alpha dropped, as the
  paper's `decode_image(channels=3)` drops it).

The format: chunks after an 8-byte signature, IHDR first (width, height, bit depth, colour type, compression 0,
filter method 0, interlace 0 or 1 = Adam7); the IDAT chunks' data concatenated is one zlib stream of scanlines,
each a filter-type byte (0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth) and the filtered bytes, ceil(width x bits per
pixel / 8) of them; samples big-endian. Sub and Up are undone a row at a time (Sub is a running sum along each
byte lane), Average and Paeth a pixel at a time (each pixel needs the one before it): about a second for a 224 x
224 image that uses them throughout, a rare format's price. The caller has already opened the file with Pillow
(its pixel-count guard and its CRC checks ran); a stream is never inflated past the size its header declares.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {2: 3, 6: 4}  # colour type -> samples per pixel (RGB, RGBA): the 16-bit colour this module decodes
_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # every colour type -> samples per pixel (grey, RGB, palette, grey +
# alpha, RGBA: PNG spec, 6.1 "Colour types and values")
# Adam7's passes: (first row, first column, row step, column step) (PNG spec, 8.2)
_ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))


class PngError(ValueError):
    """The bytes are not a 16-bit colour PNG this module can decode whole (the message says why)."""


def is_deep_colour(head: bytes) -> bool:
    """Whether a file starting with `head` (its first 26 bytes or more) is a 16-bit RGB or RGBA PNG."""
    return len(head) >= 26 and head[:8] == SIGNATURE and head[12:16] == b"IHDR" and head[24] == 16 \
        and head[25] in _CHANNELS


def decode(data: bytes) -> np.ndarray:
    """A 16-bit RGB/RGBA PNG's pixels as float32 (H, W, 3) in [0, 1]; PngError when it does not decode whole."""
    width, height, depth, ctype, interlace, idat = _chunks(data)
    if depth != 16 or ctype not in _CHANNELS:
        raise PngError(f"not a 16-bit colour PNG (bit depth {depth}, colour type {ctype})")
    bpp = 2 * _CHANNELS[ctype]  # bytes per pixel
    passes, sizes, expected = _layout(width, height, 8 * bpp, interlace)
    raw = _inflated(idat, expected + 1)
    if len(raw) != expected:
        raise PngError(f"its image data holds {len(raw)}{'+' if len(raw) > expected else ''} bytes where its "
                       f"header declares {expected}")
    out = np.empty((height, width, bpp), np.uint8)
    at = 0
    for (r0, c0, dr, dc), (h, w) in zip(passes, sizes):
        if h <= 0 or w <= 0:
            continue
        n = h * (w * bpp + 1)
        out[r0::dr, c0::dc] = _unfilter(np.frombuffer(raw, np.uint8, n, at).reshape(h, w * bpp + 1), bpp
                                        ).reshape(h, w, bpp)
        at += n
    samples = out.view(">u2").reshape(height, width, bpp // 2)[..., :3]
    return samples.astype(np.float32) / np.float32(65535)


def short_data(data: bytes) -> str | None:
    """Why a PNG's image data is not all there (it inflates to fewer bytes than its header declares, or not at
    all), else None: what Pillow decodes with the rows missing black. Data past the declared size is libpng's
    benign error, not refused here (Pillow reads the declared rows)."""
    try:
        width, height, depth, ctype, interlace, idat = _chunks(data)
        if ctype not in _SAMPLES:
            raise PngError(f"colour type {ctype} (0, 2, 3, 4 and 6 exist)")
        expected = _layout(width, height, depth * _SAMPLES[ctype], interlace)[2]
        got = len(_inflated(idat, expected))
    except PngError as e:
        return str(e)
    if got < expected:
        return (f"its image data holds {got} bytes where its header declares {expected} ({width}x{height}, "
                f"{depth}-bit, colour type {ctype}): the rows past them would read as black")
    return None


def _layout(width: int, height: int, bits: int, interlace: int) -> tuple[tuple, list[tuple[int, int]], int]:
    """(the passes, each pass's (rows, pixels per row), the bytes of scanlines the header declares) of an image
    of `bits` bits per pixel: each row of a pass is a filter-type byte and ceil(pixels x bits / 8) bytes."""
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    sizes = [(-(-(height - r0) // dr), -(-(width - c0) // dc)) for r0, c0, dr, dc in passes]
    return passes, sizes, sum(h * (-(-w * bits // 8) + 1) for h, w in sizes if h > 0 and w > 0)


def _inflated(idat: bytes, most: int) -> bytes:
    """The image data inflated, at most `most` bytes of it (never past what the header declares, plus one)."""
    try:
        return zlib.decompressobj().decompress(idat, most)
    except zlib.error as e:
        raise PngError(f"its image data does not inflate: {e}") from None


def _chunks(data: bytes) -> tuple[int, int, int, int, int, bytes]:
    if data[:8] != SIGNATURE:
        raise PngError("no PNG signature")
    pos, header, idat = 8, None, []
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length:
            raise PngError(f"chunk {kind!r} is cut short")
        if kind == b"IHDR":
            if length != 13:
                raise PngError("its IHDR is not 13 bytes")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None or not idat:
        raise PngError("no IHDR or no IDAT chunk")
    width, height, depth, ctype, compression, filtering, interlace = header
    if not (width and height) or compression or filtering or interlace not in (0, 1):
        raise PngError(f"an IHDR this decoder does not know ({width}x{height}, compression {compression}, "
                       f"filter method {filtering}, interlace {interlace})")
    return width, height, depth, ctype, interlace, b"".join(idat)


def _unfilter(rows: np.ndarray, bpp: int) -> np.ndarray:
    """(h, 1 + stride) filtered scanlines -> (h, stride) bytes (PNG spec, 9: filter type 0 for row 1's 'above')."""
    h, stride = rows.shape[0], rows.shape[1] - 1
    out = np.empty((h, stride), np.uint8)
    prior = np.zeros(stride, np.int32)
    for y in range(h):
        kind, line = int(rows[y, 0]), rows[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 1:  # Sub: x + the byte bpp before, a running sum along each byte lane
            cur = line.reshape(-1, bpp).cumsum(axis=0).ravel() & 255
        elif kind == 2:  # Up
            cur = (line + prior) & 255
        elif kind in (3, 4):  # Average, Paeth: each pixel needs the one just reconstructed
            cur = np.empty(stride, np.int32)
            left = upleft = np.zeros(bpp, np.int32)
            for x in range(0, stride, bpp):
                up = prior[x:x + bpp]
                if kind == 3:
                    pred = (left + up) >> 1
                else:
                    p = left + up - upleft
                    pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - upleft)
                    pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
                cur[x:x + bpp] = left = (line[x:x + bpp] + pred) & 255
                upleft = up
        else:
            raise PngError(f"row {y} has filter type {kind} (0-4 exist)")
        out[y] = cur
        prior = cur.astype(np.int32)
    return out
