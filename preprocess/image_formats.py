"""Facts about an image file's bytes that PIL does not tell: is a JPEG whole, is it HEIC, and
how many bits of a 16-bit PNG are real.

Why the JPEG check: PIL and TensorFlow decode JPEGs with the same libjpeg-turbo, but PIL
accepts a file whose markers never reach the end-of-image marker (EOI) once every row is
decoded (Pillow's JpegDecode.c ignores that jpeg_finish_decompress ran out of data), while
TensorFlow's decode_jpeg, the trainer's decoder, rejects it. That happens when a run of
bytes in the middle is overwritten and forms a marker, or when the EOI itself is lost.
find_jpeg_end_problem walks the markers as libjpeg's reader does, in C-speed regex
searches (~30 microseconds for a 100 KB photo, 3% of its decode), so the trainer never meets such a file.
tests/preprocess/test_image_formats.py checks the two decoders' verdicts agree on a few
hundred damaged JPEGs.

    .venv/bin/python -m preprocess.image_formats some.jpg other.png
"""
import re
import struct
import sys

SOI, EOI, SOS = 0xD8, 0xD9, 0xDA
# Markers without a length field: TEM and the restart markers RST0-RST7.
STANDALONE_MARKERS = frozenset([0x01, *range(0xD0, 0xD8)])
# A marker: 0xFF, then any byte but 0x00 (0xFF 0x00 is a stuffed data byte, not a marker)
# or 0xFF (fill bytes before a marker: the match is at the last one). No "\xff+": a
# repeat defeats the regex engine's literal-prefix search, 17x slower on a photo.
NEXT_MARKER = re.compile(rb"\xff([^\x00\xff])")
# Inside a scan's entropy-coded data the restart markers belong to the scan too.
MARKER_ENDING_A_SCAN = re.compile(rb"\xff([^\x00\xd0-\xd7\xff])")
# ISO-BMFF "ftyp" brands of HEIF images: what an iPhone saves as .HEIC, often renamed .jpg.
HEIF_BRANDS = frozenset([b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"])
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def find_jpeg_end_problem(data):
    """None when libjpeg's marker reader reaches EOI within ``data`` (a JPEG); else why not."""
    pos = 2  # after SOI
    while True:
        match = NEXT_MARKER.search(data, pos)
        if match is None:
            return "no end-of-image marker: the file is cut short or its end is overwritten"
        marker, pos = match.group(1)[0], match.end()
        if marker == EOI:
            return None
        if marker in STANDALONE_MARKERS or marker == SOI:
            continue
        if pos + 2 > len(data):
            return f"marker 0xFF{marker:02X} at byte {match.start()} is cut short"
        pos += struct.unpack(">H", data[pos:pos + 2])[0]
        if marker == SOS:
            scan_end = MARKER_ENDING_A_SCAN.search(data, pos)
            if scan_end is None:
                return "the image data runs to the end of the file without an end-of-image marker"
            pos = scan_end.start()


def heif_brand(data):
    """'heic' (etc.) when ``data`` is a HEIF/HEIC image, which PIL cannot decode; else None."""
    if data[4:8] == b"ftyp" and data[8:12] in HEIF_BRANDS:
        return data[8:12].decode("ascii")
    return None


def png_significant_bits(data):
    """The sample depth a PNG's sBIT chunk declares (e.g. 12 for a 12-bit camera in a 16-bit
    PNG), or None when there is none. Read from the chunks before the first IDAT."""
    if not data.startswith(PNG_SIGNATURE):
        return None
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            return None
        if kind == b"sBIT" and length >= 1:
            return data[pos + 8]
        pos += 12 + length  # length, type, body, CRC
    return None


def main(argv):
    for path in argv[1:]:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\xff\xd8":
            print(f"{path}: JPEG, {find_jpeg_end_problem(data) or 'markers reach EOI'}")
        else:
            print(f"{path}: HEIF brand {heif_brand(data)}, PNG sBIT {png_significant_bits(data)}")


if __name__ == "__main__":
    main(sys.argv)
