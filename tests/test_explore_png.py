"""The explorer's PNG writer (explore/_png.py) against Pillow's decoder: every pixel back, RGB where the image is
opaque and RGBA where it is not, for every byte value in every channel; and the explorer's frame decodes to its
canvas."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from zerosim.explore._png import png_bytes


def decoded(data: bytes) -> tuple:
    image = Image.open(io.BytesIO(data))
    image.load()  # checks every chunk's CRC and the zlib stream's Adler-32
    return image.mode, np.asarray(image)


def test_every_byte_value_in_every_channel_comes_back():
    values = np.arange(256, dtype=np.uint8)
    rgba = np.stack(np.meshgrid(values, values[::-1], indexing="ij") * 2, axis=-1)  # (256, 256, 4): all pairs
    mode, back = decoded(png_bytes(rgba))
    assert mode == "RGBA" and np.array_equal(back, rgba)
    rgba[..., 3] = 255
    mode, back = decoded(png_bytes(rgba))
    assert mode == "RGB" and np.array_equal(back, rgba[..., :3])


@settings(max_examples=60)
@given(arrays(np.uint8, st.tuples(st.integers(1, 40), st.integers(1, 40), st.just(4))), st.booleans())
def test_any_image_comes_back(rgba, opaque):
    if opaque:
        rgba[..., 3] = 255
    mode, back = decoded(png_bytes(rgba))
    assert mode == ("RGB" if (rgba[..., 3] == 255).all() else "RGBA")
    assert np.array_equal(back, rgba[..., :back.shape[2]])


def test_a_strided_view_is_written_as_its_pixels():
    rgba = np.random.default_rng(0).integers(0, 256, (30, 50, 4), dtype=np.uint8)
    view = rgba[::2, ::-3]  # not contiguous, columns reversed
    assert np.array_equal(decoded(png_bytes(view))[1], view)


@pytest.mark.parametrize("bad", [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 4), np.float32),
                                 np.zeros((0, 4, 4), np.uint8), np.zeros((4, 4), np.uint8)])
def test_anything_but_an_rgba_image_is_refused(bad):
    with pytest.raises(ValueError, match=r"\(H, W, 4\) uint8"):
        png_bytes(bad)


def test_the_explorers_frame_is_its_canvas():
    from zerosim.explore import ExplorerCanvas, Settings, explore

    canvas = ExplorerCanvas()
    canvas.update(explore(Settings(model="gpt2-small", ranks=4, seq_len=512)))
    mode, back = decoded(canvas.png())
    pixels = np.asarray(canvas.figure.canvas.buffer_rgba())
    assert mode == "RGB" and (pixels[..., 3] == 255).all() and np.array_equal(back, pixels[..., :3])
