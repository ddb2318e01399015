"""The per-image validate/convert function shared by the DoFn and the benchmark."""
import io
import warnings

import numpy as np
import pytest
from PIL import ExifTags, Image, ImageFile

from common import image_uris
from preprocess import images
from tests.conftest import encode_image, pattern_image
from tests.preprocess.conftest import bomb_png, hostile_files
from tests.preprocess.test_image_formats import with_sbit

IMAGE_CASES = {name: (data, outcome) for name, (data, _, outcome) in hostile_files().items()
               if data is not None and outcome != "unknown_label"}


@pytest.mark.parametrize("name", sorted(IMAGE_CASES))
def test_each_hostile_file_gets_its_expected_outcome(name):
    data, outcome = IMAGE_CASES[name]
    if not outcome.startswith("ok:"):
        with pytest.raises(image_uris.InputRejected) as caught:
            images.convert_image(data)
        assert caught.value.reason == outcome
        return
    result = images.convert_image(data)
    expected = tuple(c for c in outcome[3:].split(",") if c)
    assert result.conversions == expected
    decoded = Image.open(io.BytesIO(result.jpeg))
    assert (decoded.format, decoded.mode) == ("JPEG", "RGB")
    assert decoded.size == (result.width, result.height)
    if not expected:
        assert result.jpeg == data  # nothing to change: the original bytes are kept


def test_alpha_is_composited_onto_white():
    rgba = np.zeros((8, 8, 4), np.uint8)  # fully transparent black
    result = images.convert_image(encode_image(rgba, fmt="PNG"))
    pixels = np.asarray(Image.open(io.BytesIO(result.jpeg)))
    assert pixels.min() > 245


def test_resize_scales_the_longest_side_down_only():
    data = encode_image(pattern_image(100, 300, seed=1))
    result = images.convert_image(data, resize=60)
    assert (result.height, result.width, result.conversions) == (20, 60, ("resized",))
    small = images.convert_image(data, resize=1000)
    assert small.jpeg == data and small.conversions == ()


@pytest.mark.parametrize("data, max_pixels", [
    (bomb_png(), images.DEFAULT_MAX_PIXELS),      # beyond PIL's own limit too
    (bomb_png(9000, 9000), images.DEFAULT_MAX_PIXELS),
    (encode_image(pattern_image(40, 40, 1)), 1000),
])
def test_pixel_limit_rejects_before_decoding(data, max_pixels):
    with pytest.raises(image_uris.InputRejected, match="pixels") as caught:
        images.convert_image(data, max_pixels=max_pixels)
    assert caught.value.reason == image_uris.TOO_MANY_PIXELS


def test_cmyk_becomes_rgb_with_similar_colours():
    rgb = pattern_image(16, 16, seed=3)
    result = images.convert_image(encode_image(rgb, mode="CMYK"))
    back = np.asarray(Image.open(io.BytesIO(result.jpeg)), np.float32)
    assert back.shape == (16, 16, 3)
    assert np.abs(back - rgb).mean() < 25


def test_pils_own_size_warning_is_silenced():
    """100 Mpx is above PIL's warning limit: our max_pixels decides, with no warning.
    (pytest drops filters set while it imports, so the test sets it again.)"""
    bomb = bomb_png(10_000, 10_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(image_uris.InputRejected, match="too_many_pixels"):
            images.convert_image(bomb)
    assert [w.category for w in caught] == [Image.DecompressionBombWarning]  # the trigger
    with warnings.catch_warnings(record=True) as caught:
        images.silence_pil_size_warning()
        with pytest.raises(image_uris.InputRejected, match="too_many_pixels"):
            images.convert_image(bomb)
    assert caught == []


def decoded(result):
    return np.asarray(Image.open(io.BytesIO(result.jpeg)).convert("L"), np.int32)


@pytest.mark.parametrize("bits", [16, 12])
def test_16_bit_gray_becomes_the_matching_8_bit_gradient(bits):
    """PIL's own convert() clips at 255, which turned a scan white: the full range scales."""
    full = (1 << bits) - 1
    gradient = np.tile(np.linspace(0, full, 256).round().astype(np.uint16), (8, 1))
    png = encode_image_raw(gradient, "PNG")  # PIL mode I;16
    png = png if bits == 16 else with_sbit(png, bits)
    result = images.convert_image(png, quality=100)
    assert result.conversions == ("format_png", "mode_i;16")
    expected = np.tile(np.arange(256), (8, 1))  # gradient * 255 / full, rounded
    assert np.abs(decoded(result) - expected).max() <= 2


def test_16_bit_gray_of_another_format_and_32_bit_pixels():
    ppm = b"P5 4 1 65535\n" + np.array([0, 257 * 100, 257 * 200, 65535], ">u2").tobytes()
    assert list(decoded(images.convert_image(ppm, quality=100))[0]) == [0, 100, 200, 255]
    for pixels, what in [(np.full((4, 4), 1 << 20, np.int32), "32-bit integer"),
                         (np.full((4, 4), 0.5, np.float32), "floating-point")]:
        with pytest.raises(image_uris.InputRejected, match=what) as caught:
            images.convert_image(encode_image_raw(pixels, "TIFF"))
        assert caught.value.reason == image_uris.UNSUPPORTED_FORMAT


def encode_image_raw(pixels, fmt):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def test_exif_orientation_is_applied_and_the_exif_dropped():
    upright = np.zeros((20, 40, 3), np.uint8)
    upright[:, 20:] = 255  # left half black, right half white, as the person saw it
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 6  # "rotate 90 clockwise to display": a phone held upright
    stored = encode_image(np.rot90(upright), exif=exif.tobytes())
    result = images.convert_image(stored)
    assert result.conversions == ("exif_rotated",) and (result.height, result.width) == (20, 40)
    assert np.abs(decoded(result) - upright[..., 0]).mean() < 8
    assert ExifTags.Base.Orientation not in Image.open(io.BytesIO(result.jpeg)).getexif()
    exif[ExifTags.Base.Orientation] = 1  # upright already: the bytes are kept
    kept = encode_image(upright, exif=exif.tobytes())
    assert images.convert_image(kept).jpeg == kept


def test_an_animated_gif_gives_its_first_frame_and_says_so():
    frames = [Image.new("RGB", (16, 16), colour) for colour in ((250, 0, 0), (0, 0, 250))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    result = images.convert_image(buffer.getvalue(), quality=100)
    assert result.conversions == ("format_gif", "mode_p", "first_frame")
    red, _, blue = np.asarray(Image.open(io.BytesIO(result.jpeg))).mean(axis=(0, 1))
    assert red > 200 and blue < 40


def test_a_heic_file_named_jpg_is_unsupported_with_the_reason():
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(200)
    with pytest.raises(image_uris.InputRejected, match="HEIC.*convert it to JPEG") as caught:
        images.convert_image(heic)
    assert caught.value.reason == image_uris.UNSUPPORTED_FORMAT


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "BMP"])
def test_a_file_cut_anywhere_is_refused_never_raised(fmt):
    """`head -c N` of a real image, for N across the file but its last 32 bytes: an
    InputRejected every time (a header cut inside PIL's plugin once raised OSError and
    killed the job). A PNG whose pixels all arrived and only its checksums and IEND
    trailer are cut decodes whole, and is kept."""
    data = encode_image(pattern_image(40, 48, seed=5), fmt=fmt)
    reasons = set()
    for size in list(range(1, len(data) - 32, max(1, len(data) // 150))) + [len(data) - 32]:
        with pytest.raises(image_uris.InputRejected) as caught:
            images.convert_image(data[:size])
        reasons.add(caught.value.reason)
    assert reasons <= {image_uris.CORRUPT_IMAGE, image_uris.NOT_AN_IMAGE}
    assert image_uris.CORRUPT_IMAGE in reasons


def test_load_truncated_images_turned_on_elsewhere_stops_the_work(monkeypatch):
    """PIL would pad a cut image with grey; a module that turned that on must not go unnoticed."""
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        images.convert_image(encode_image(pattern_image(8, 8, seed=1)))
