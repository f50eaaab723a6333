"""The explorer's frame as PNG bytes: 8-bit RGB (RGBA where a pixel is not opaque), each row unfiltered, zlib level 1.

A redraw ends by encoding the 1000 x 420 frame its image widget shows. Pillow (through matplotlib's `imsave`) took
17-20 ms of a redraw here at compress level 1: for every row it tries the None, Up, Sub and Paeth filters and keeps
the smallest sum (Pillow 13.0, src/libImaging/ZipEncode.c `ImagingZipEncode`), which on a flat-coloured figure
costs more than it saves — 62 kB against 53 kB unfiltered. This writes the three chunks PNG needs (IHDR, IDAT,
IEND; the PNG specification, ISO/IEC 15948, 11.2) around one `zlib.compress`: 10 ms, the same pixels
(tests/test_explore_png.py decodes it with Pillow).
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
RGB, RGBA = 2, 6  # IHDR colour types


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(rgba: np.ndarray, level: int = 1) -> bytes:
    """PNG bytes of `rgba`, an (H, W, 4) uint8 image (a canvas's `buffer_rgba()`): RGB where every alpha is 255."""
    rgba = np.asarray(rgba)
    if rgba.dtype != np.uint8 or rgba.ndim != 3 or rgba.shape[2] != 4 or 0 in rgba.shape:
        raise ValueError(f"png_bytes takes an (H, W, 4) uint8 image; got {rgba.shape} {rgba.dtype}")
    h, w, _ = rgba.shape
    kind, channels = (RGB, 3) if rgba[..., 3].min() == 255 else (RGBA, 4)
    rows = np.empty((h, 1 + w * channels), np.uint8)  # each row: its filter type (0, none), then its pixels
    rows[:, 0] = 0
    rows[:, 1:].reshape(h, w, channels)[...] = rgba[..., :channels]
    header = struct.pack(">IIBBBBB", w, h, 8, kind, 0, 0, 0)  # 8 bits a sample; deflate; adaptive; no interlace
    return (SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, level))
            + _chunk(b"IEND", b""))
