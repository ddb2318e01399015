"""CSVs of image URIs, read the same way by preprocessing and by both batch-prediction routes.

One line is ``uri[,label]``; a relative uri is resolved against the CSV's own
folder; a UTF-8 byte-order mark (what spreadsheets write as "CSV UTF-8") is
not part of the first uri. An input that cannot be used raises InputRejected
with one of the REASONS, the words of the dead letters, counters and error
records. No Beam and no TensorFlow here: each stage passes the opener of its
file system (Beam FileSystems, tf.io.gfile) for gs:// and other remote URIs.

    .venv/bin/python -m common.image_uris work/demo/images/eval.csv   # first lines, resolved
"""
import csv
import os
import posixpath
import re
import sys


# Why an input was refused: the key of its dead letter / error record and counter.
MALFORMED_CSV_LINE = "malformed_csv_line"  # not 'uri,label' (or 'uri'), or unbalanced quotes
HEADER_LINE = "header_line"                # a first line like 'uri,label': column names, no image
UNKNOWN_LABEL = "unknown_label"            # not in the given labels file
MISSING_FILE = "missing_file"
UNREADABLE_FILE = "unreadable_file"        # exists, but reading it failed (permissions, ...)
EMPTY_FILE = "empty_file"
NOT_AN_IMAGE = "not_an_image"              # no known image header
TOO_MANY_PIXELS = "too_many_pixels"        # over --max_pixels (decompression-bomb guard)
CORRUPT_IMAGE = "corrupt_image"            # an image header, but decoding failed
UNSUPPORTED_FORMAT = "unsupported_format"  # a known image kind that cannot be used (HEIC, float pixels)
INVALID_LABEL = "invalid_label"            # a label that is not UTF-8 text (labels.txt is UTF-8)
NOT_IN_LABEL_FOLDER = "not_in_label_folder"  # --input_dir: a file not at ROOT/<label>/<file>
REASONS = (MALFORMED_CSV_LINE, HEADER_LINE, UNKNOWN_LABEL, MISSING_FILE, UNREADABLE_FILE, EMPTY_FILE,
           NOT_AN_IMAGE, TOO_MANY_PIXELS, CORRUPT_IMAGE, UNSUPPORTED_FORMAT, INVALID_LABEL,
           NOT_IN_LABEL_FOLDER)
BOM = "\ufeff"
# A column name, not a file: a word with no '/', no '.' and no scheme ('uri', 'image_path').
HEADER_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_ -]*$")


class InputRejected(ValueError):
    """One input (a CSV line, a file, an image) cannot be used; reason is one of REASONS."""

    def __init__(self, reason, detail):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def split_csv_line(line, field_counts, required=1, origin=""):
    """The stripped fields of one CSV line; InputRejected(malformed_csv_line) unless their
    number is in field_counts and the first ``required`` are not empty. Unbalanced quotes
    are malformed (strict parsing), not part of a file name.

    origin ("name.csv:N") marks line 1, where a header is refused as header_line: so
    'uri,label' never becomes an image, nor 'label' a class (see is_header).
    """
    try:
        fields = [field.strip() for field in next(csv.reader([line], strict=True))]
    except csv.Error as err:
        raise InputRejected(MALFORMED_CSV_LINE, f"{err}: {line!r}") from None
    if len(fields) not in field_counts or not all(fields[:required]):
        expected = " or ".join(repr(",".join(["uri", "label"][:n])) for n in field_counts)
        raise InputRejected(MALFORMED_CSV_LINE,
                            f"expected {expected}, got {len(fields)} field(s): {line!r}")
    if origin.endswith(":1") and is_header(fields[0]):
        raise InputRejected(HEADER_LINE, f"{line!r} is a header: its uri {fields[0]!r} is a "
                                         f"column name, not a file (no '/' or '.')")
    return fields


def is_header(uri):
    """True for a column name such as 'uri' or 'image_path'; image paths have a '/' or a '.'."""
    return bool(HEADER_WORD.match(uri))


def resolve_uri(uri, base_dir):
    """Absolute and scheme URIs stay as they are; others are relative to base_dir."""
    if "://" in uri or uri.startswith("/"):
        return uri
    return posixpath.join(base_dir, uri)


def read_csv_lines(path, open_binary, errors="replace"):
    """Yields (origin, line) for every non-blank line of the CSV at path, e.g. ("train.csv:3", ...).

    open_binary(path) opens it for reading bytes. The line numbers count blank lines too,
    so an origin points at the line a person sees in an editor. Windows line ends (CRLF)
    are line ends. errors: how bytes that are not UTF-8 are decoded; "surrogateescape"
    keeps a local file name in another encoding (b'caf\\xe9.jpg') openable.
    """
    name = posixpath.basename(path)
    with open_binary(path) as f:
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8", errors=errors).rstrip("\r\n")
            if number == 1:
                line = line.removeprefix(BOM)
            if line.strip():
                yield f"{name}:{number}", line


def read_image_bytes(uri, open_remote):
    """The file's bytes; InputRejected(missing_file | unreadable_file) naming uri.

    Local paths use the builtin open (Beam's per-file lookup costs ~17 us of GIL
    per photo); URIs with a scheme use open_remote(uri). Transient cloud errors
    (HTTP 429 and 5xx) are raised as they are, so that a runner retries the work
    instead of rejecting a good image.
    """
    try:
        if "://" not in uri:
            with open(uri, "rb") as f:
                return f.read()
        with open_remote(uri) as f:
            return f.read()
    except read_error_types() as err:
        reason = reason_of_read_error(err)
        if reason is None:
            raise
        detail = name_uri(uri, getattr(err, "message", None) or str(err))
        raise InputRejected(reason, detail + describe_dangling_link(uri)) from None


def describe_dangling_link(uri):
    """' (a symlink to X, which does not exist)' for a local dangling symlink, else ''."""
    if "://" in uri or not os.path.islink(uri) or os.path.exists(uri):
        return ""
    return f" (a symlink to {os.readlink(uri)}, which does not exist)"


def google_api_exceptions():
    """google.api_core.exceptions (apache-beam[gcp]'s) when something loaded it, else None: only
    a GCS client raises its errors, and importing it costs every command 0.4 s (it scans the
    installed packages' versions)."""
    return sys.modules.get("google.api_core.exceptions")


def read_error_types():
    """OSError and, when loaded, Google API errors and TensorFlow's file errors."""
    tf, google = sys.modules.get("tensorflow"), google_api_exceptions()
    extra = (tf.errors.OpError,) if tf is not None and hasattr(tf, "errors") else ()
    return (OSError,) + ((google.GoogleAPICallError,) if google else ()) + extra


def reason_of_read_error(err):
    """MISSING_FILE or UNREADABLE_FILE; None for a transient error that should be retried."""
    google = google_api_exceptions()
    if google and isinstance(err, google.GoogleAPICallError):
        if isinstance(err, google.NotFound):
            return MISSING_FILE
        return None if err.code is None or err.code >= 500 or err.code == 429 else UNREADABLE_FILE
    if isinstance(err, FileNotFoundError) or type(err).__name__ == "NotFoundError":
        return MISSING_FILE
    # Beam wraps a missing file in BeamIOError (an OSError) on some file systems.
    if "No such file" in str(err) or "Not Found" in str(err):
        return MISSING_FILE
    return UNREADABLE_FILE


def name_uri(uri, message):
    """message, prefixed with uri unless the message already names it."""
    return message if uri in message else f"{uri}: {message}"


def main(argv):
    path = argv[1]
    for origin, line in list(read_csv_lines(path, lambda p: open(p, "rb")))[:5]:
        print(origin, resolve_uri(split_csv_line(line, (1, 2))[0], posixpath.dirname(path)))


if __name__ == "__main__":
    main(sys.argv)
