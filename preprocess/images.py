"""Validate one image by decoding it, and turn it into an upright 8-bit RGB JPEG when it is not one.

This is the per-image work of the pipeline as a plain function of bytes, so
the Beam DoFn and the benchmark's loop and pool baselines run the same code.
What happens to each kind of input, and the test of each: docs/preprocessing.md
"What happens to each kind of input".

    python -m preprocess.images some.png other.jpg      # print what would happen to each
"""
import dataclasses
import io
import struct
import sys
import warnings

import numpy as np
from PIL import ExifTags, Image, ImageFile, ImageOps, UnidentifiedImageError

from common.image_uris import (CORRUPT_IMAGE, EMPTY_FILE, NOT_AN_IMAGE, TOO_MANY_PIXELS,
                               UNSUPPORTED_FORMAT, InputRejected)
from preprocess import image_formats

# A 12-megapixel phone photo is 12e6; 50e6 leaves room for large scans while a
# crafted "decompression bomb" (a small file declaring 1e9+ pixels) is refused
# before any pixel is decoded.
DEFAULT_MAX_PIXELS = 50_000_000
# Re-encoding quality: 95 keeps JPEG artefacts far below what training notices.
DEFAULT_JPEG_QUALITY = 95
# PIL names for files that are JPEG streams; MPO is a phone JPEG with an extra
# preview image appended, which every JPEG decoder reads as its first frame.
JPEG_FORMATS = ("JPEG", "MPO")
# PIL's modes of 16-bit (and 32-bit integer) grayscale: scans, microscopes, PGM/PPM 16-bit.
WIDE_GRAY_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
# What a broken header raises inside PIL's plugins (a file cut inside its header, a length
# field pointing past the end); UnidentifiedImageError (an OSError) is caught before these.
HEADER_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error)
# EXIF orientations 2-8 mean "display this mirrored and/or rotated"; 1 is upright.
UPRIGHT = 1


def silence_pil_size_warning():
    """Our own max_pixels decides (check_pixel_count): PIL's warning at its default
    limit is noise. Filtered for the whole process, once at import, rather than per
    image with warnings.catch_warnings(), which is not thread-safe, and images are
    opened by several threads at once (preprocess/work_pool.py)."""
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


silence_pil_size_warning()


@dataclasses.dataclass(frozen=True)
class ConvertedImage:
    jpeg: bytes          # a 3-channel (RGB) JPEG
    height: int          # pixels
    width: int           # pixels
    conversions: tuple   # what was changed, e.g. ("format_png", "mode_rgba"); () = original bytes


def convert_image(data, max_pixels=DEFAULT_MAX_PIXELS, resize=0,
                  quality=DEFAULT_JPEG_QUALITY):
    """Decodes ``data`` fully and returns a ConvertedImage, or raises InputRejected.

    resize: if > 0, the longest side is scaled down to this many pixels.
    The original bytes are returned untouched when they already are an upright RGB
    JPEG within the size limit.
    """
    image = open_image(data, max_pixels)
    conversions = list_conversions(image, resize)
    if not conversions:
        return ConvertedImage(data, image.height, image.width, ())
    if "exif_rotated" in conversions:
        image = ImageOps.exif_transpose(image)  # the EXIF is not re-encoded: it is dropped
    rgb = resize_longest_side(to_rgb(image, data), resize)
    return ConvertedImage(encode_jpeg(rgb, quality), rgb.height, rgb.width,
                          tuple(conversions))


def open_image(data, max_pixels):
    """Returns a fully decoded PIL image; rejects empty, non-image, huge and corrupt data."""
    if not data:
        raise InputRejected(EMPTY_FILE, "0 bytes")
    image = read_header(data)
    check_pixel_count(image, max_pixels)
    check_decodable(image, data)
    if ImageFile.LOAD_TRUNCATED_IMAGES:  # a global any imported module may have set
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is on (set by another module): "
                           "cut-short images would be padded with grey instead of rejected")
    try:
        image.load()  # the header alone proves nothing: decode every pixel
    except (OSError, SyntaxError, ValueError, EOFError) as err:
        raise InputRejected(CORRUPT_IMAGE, f"{image.format} decode failed: {err}") from err
    return image


def read_header(data):
    """PIL's image object from the header alone; InputRejected naming what is wrong."""
    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError as err:
        brand = image_formats.heif_brand(data)
        if brand:
            raise InputRejected(UNSUPPORTED_FORMAT, (
                f"a HEIC/HEIF image (brand {brand!r}, an iPhone photo?) whatever its file name "
                "says; PIL and TensorFlow cannot decode it: convert it to JPEG first")) from err
        raise InputRejected(NOT_AN_IMAGE, f"{len(data)} bytes, no known image header") from err
    except Image.DecompressionBombError as err:
        raise InputRejected(TOO_MANY_PIXELS, str(err)) from err
    except HEADER_ERRORS as err:
        raise InputRejected(CORRUPT_IMAGE, f"{len(data)} bytes, the header is cut short or "
                                           f"damaged: {err or type(err).__name__}") from err


def check_decodable(image, data):
    """Rejects what the trainer's decoder would reject though PIL would not (image_formats),
    and pixels with no defined 0-255 range."""
    if image.format in JPEG_FORMATS:
        problem = image_formats.find_jpeg_end_problem(data)
        if problem:
            raise InputRejected(CORRUPT_IMAGE, f"JPEG data damaged: {problem}")
    if image.mode == "F":
        raise InputRejected(UNSUPPORTED_FORMAT, f"{image.format} of 32-bit floating-point pixels: "
                                                "no fixed range to map to 0-255; save it as 8 or 16 bits")


def check_pixel_count(image, max_pixels):
    """Rejects images above ``max_pixels`` using the header, before decoding anything."""
    pixels = image.width * image.height
    if max_pixels and pixels > max_pixels:
        raise InputRejected(
            TOO_MANY_PIXELS,
            f"{image.width}x{image.height}={pixels} pixels > max_pixels={max_pixels}")


def list_conversions(image, resize):
    """What must change for ``image`` to become an upright RGB JPEG within ``resize``."""
    conversions = []
    if image.format not in JPEG_FORMATS:
        conversions.append(f"format_{str(image.format).lower()}")
    if image.mode != "RGB":
        conversions.append(f"mode_{image.mode.lower()}")
    # GIF, APNG, WebP, TIFF pages: frame 0 is the one PIL loaded. An MPO's second image
    # is a preview or depth map, not a frame: its JPEG is kept as it is.
    if image.format != "MPO" and getattr(image, "is_animated", False):
        conversions.append("first_frame")
    if image.getexif().get(ExifTags.Base.Orientation, UPRIGHT) != UPRIGHT:
        conversions.append("exif_rotated")  # TensorFlow ignores EXIF: store it upright
    if resize and max(image.size) > resize:  # before rotation: the longest side is the same
        conversions.append("resized")
    return conversions


def to_rgb(image, data=b""):
    """3-channel RGB; transparent pixels are composited onto white, not black; 16-bit gray is
    scaled to 8 bits (data: the file, for a PNG's declared bit depth)."""
    if image.mode == "RGB":
        return image
    if image.mode in WIDE_GRAY_MODES:
        return scale_to_8_bits(image, image_formats.png_significant_bits(data) or 16).convert("RGB")
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info)
    if not has_alpha:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background


def scale_to_8_bits(image, bits):
    """A 16-bit (or 32-bit integer) grayscale image -> mode "L", scaling its full range
    (2**bits - 1, e.g. 65535 -> 255) rather than clipping at 255 as PIL's convert() does,
    which turns a scan white. Values beyond 16 bits: UNSUPPORTED_FORMAT."""
    pixels = np.asarray(image)
    if pixels.min() < 0 or pixels.max() > 0xFFFF:
        raise InputRejected(UNSUPPORTED_FORMAT, f"{image.format} of 32-bit integer pixels "
                                                f"({pixels.min()}..{pixels.max()}): save it as 8 or 16 bits")
    full = (1 << bits) - 1
    scaled = (pixels.astype(np.uint32) * 255 + full // 2) // full
    return Image.fromarray(np.minimum(scaled, 255).astype(np.uint8), mode="L")


def resize_longest_side(image, resize):
    """Scales down (never up) so that max(height, width) <= resize; 0 = keep."""
    longest = max(image.size)
    if not resize or longest <= resize:
        return image
    scale = resize / longest
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.BICUBIC, reducing_gap=3.0)


def encode_jpeg(image, quality):
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def main(argv):
    for path in argv[1:]:
        with open(path, "rb") as f:
            data = f.read()
        try:
            result = convert_image(data)
        except InputRejected as err:
            print(f"{path}: rejected, {err}")
            continue
        print(f"{path}: {result.width}x{result.height}, "
              f"conversions={list(result.conversions) or 'none'}")


if __name__ == "__main__":
    main(sys.argv)
