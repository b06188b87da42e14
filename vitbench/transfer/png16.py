"""16-bit colour PNGs at the values they hold: Pillow opens a 16-bit RGB or RGBA PNG as 8-bit RGB (each sample's
high byte), so `pools.decode_bytes` decodes those here, from the file's own bytes, to float32 (H, W, 3) in
[0, 1] (samples over 65535; alpha dropped, as the paper's `decode_image(channels=3)` drops it).

The format (PNG specification, W3C, 3rd edition: https://www.w3.org/TR/png-3/): chunks after an 8-byte
signature, IHDR first (width, height, bit depth, colour type, compression 0, filter method 0, interlace 0 or 1
= Adam7); the IDAT chunks' data concatenated is one zlib stream of scanlines, each a filter-type byte (0 None,
1 Sub, 2 Up, 3 Average, 4 Paeth) and the filtered bytes; samples big-endian. Sub and Up are undone a row at a
time (Sub is a running sum along each byte lane), Average and Paeth a pixel at a time (each pixel needs the one
before it): about a second for a 224 x 224 image that uses them throughout, a rare format's price. The caller
has already opened the file with Pillow (its pixel-count guard and its CRC checks ran); a stream that inflates
past the size its header declares is refused before it is all inflated.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {2: 3, 6: 4}  # colour type -> samples per pixel (RGB, RGBA)
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
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    sizes = [(-(-(height - r0) // dr), -(-(width - c0) // dc)) for r0, c0, dr, dc in passes]
    expected = sum(h * (w * bpp + 1) for h, w in sizes if h > 0 and w > 0)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(idat, expected + 1)
    except zlib.error as e:
        raise PngError(f"its image data does not inflate: {e}") from None
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
