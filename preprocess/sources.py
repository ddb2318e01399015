"""Input rows: CSV lines and folder trees -> Row(source, label, split), plus the hash split.

Pure functions plus Beam FileSystems I/O, so local paths and gs:// behave the same.
File names that are not UTF-8 (b'caf\\xe9.jpg' on Linux) are read: Python holds such a
local name with surrogates (surrogateescape), which Beam's string coder cannot carry
between steps, so they travel as bytes (to_transport) and a Row keeps the real name in
raw_source; records and dead letters show it escaped (printable: 'caf\\xe9.jpg').
A label must be UTF-8 text (labels.txt is UTF-8).

    python -m preprocess.sources gs://cloud-ml-data/img/flower_photos/eval_set.csv   # first rows
"""
import dataclasses
import os
import posixpath
import sys

from apache_beam.io.filesystems import FileSystems

from common import image_uris
from preprocess.splits import split_of


@dataclasses.dataclass(frozen=True)
class Row:
    source: str   # the image URI (local path or gs://...), printable
    label: str    # the label string as written in the input
    split: str    # "train", "eval", or the name given with --input_csv NAME=PATH
    origin: str   # where the row came from, e.g. "train.csv:12" or the folder root
    raw_source: bytes = b""  # a local name that is not UTF-8: its bytes; source shows it escaped


def make_row(source, label, split, origin):
    """A Row Beam can carry: a name with surrogates goes to raw_source as its bytes."""
    if is_utf8(source):
        return Row(source, label, split, origin)
    return Row(printable(source), label, split, origin, os.fsencode(source))


def path_to_open(row):
    """The local path (with surrogates again) or URI to read a row's image from."""
    return os.fsdecode(row.raw_source) if row.raw_source else row.source


def to_transport(text):
    """text for a Beam element: as it is when UTF-8, else its bytes (from_transport undoes it)."""
    return text if is_utf8(text) else os.fsencode(text)


def from_transport(value):
    return os.fsdecode(value) if isinstance(value, bytes) else value


def parse_csv_line(line, origin, csv_dir, split, eval_fraction=0.0):
    """Parses one ``uri,label`` line into a Row; raises InputRejected naming the problem.

    A relative uri is resolved against the CSV's own folder. With ``split`` None
    the row's split comes from the hash of the uri as written.
    """
    uri, label = image_uris.split_csv_line(line, (2,), required=2, origin=origin)
    check_label_text(label, "the label")
    if "://" in uri and not is_utf8(uri):
        raise image_uris.InputRejected(image_uris.MALFORMED_CSV_LINE,
                                       f"{printable(uri)}: a cloud URI must be UTF-8 text")
    return make_row(image_uris.resolve_uri(uri, csv_dir), label,
                    split or split_of(uri, eval_fraction), origin)


def read_csv_lines(path):
    """Yields (origin, line) for every non-blank line of the CSV at ``path`` (local or gs://);
    a line that is not UTF-8 comes as bytes (to_transport), so its file name still opens."""
    for origin, line in image_uris.read_csv_lines(path, FileSystems.open, errors="surrogateescape"):
        yield printable(origin), to_transport(line)


def is_utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate: a byte that was not UTF-8
        return False
    return True


def printable(text):
    """text with each byte that was not UTF-8 shown as \\xNN: for records and dead letters."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_label_text(label, what):
    if not is_utf8(label):
        raise image_uris.InputRejected(image_uris.INVALID_LABEL, (
            f"{what} {printable(label)!r} is not UTF-8 text (labels.txt is UTF-8): rename it "
            "or re-save the CSV as UTF-8"))


def row_from_folder_file(path, root, eval_fraction):
    """ROOT/<label>/<file> -> Row; the split hashes '<label>/<file>', so it survives a move."""
    relative = path[len(root):].lstrip("/")
    label, _, name = relative.partition("/")
    if not name or "/" in name:
        where = "directly in" if not name else "in a sub-folder of label folder " + repr(label) + " of"
        raise image_uris.InputRejected(image_uris.NOT_IN_LABEL_FOLDER, (
            f"{printable(path)} is {where} {root}: only ROOT/<label>/<file> is read"))
    check_label_text(label, "the label folder name")
    return make_row(path, label, split_of(relative, eval_fraction), root)


def list_folder_files(root):
    """Every entry to read below ``root``, as paths: local, ROOT's files and its label folders'
    entries (symlinks followed, dangling ones too: reading them says so); gs://, every object
    under ROOT/ (a GCS listing is of all of them anyway). row_from_folder_file refuses a
    file that is not at ROOT/<label>/<file>, so none is skipped without a dead letter."""
    if "://" in root:
        for result in FileSystems.match([FileSystems.join(root, "**")]):
            for file_metadata in result.metadata_list:
                if not file_metadata.path.endswith("/"):  # a console's "folder" placeholder
                    yield file_metadata.path
        return
    for entry in sorted_entries(root):
        if entry.is_dir():  # follows a symlinked label folder
            yield from (to_transport(sub.path) for sub in sorted_entries(entry.path))
        else:
            yield to_transport(entry.path)


def sorted_entries(folder):
    with os.scandir(folder) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def read_image_bytes(uri):
    """The file's bytes; InputRejected(missing_file | unreadable_file) naming uri."""
    return image_uris.read_image_bytes(uri, open_remote)


def open_remote(uri):
    return FileSystems.open(uri, mime_type="application/octet-stream",
                            compression_type="uncompressed")


def main(argv):
    for path in argv[1:]:
        for origin, line in list(read_csv_lines(path))[:5]:
            print(parse_csv_line(from_transport(line), origin, posixpath.dirname(path), split="?"))


if __name__ == "__main__":
    main(sys.argv)
