"""Files -> top-k classes through a transport client, with an error per bad file.

Images are sent as the export decodes them (common/image_ops.decode_image, that is
tf.io.decode_image: JPEG, PNG, GIF, BMP), recognised by their first bytes; unreadable
files and files of any other kind are reported without a request. A batch the server
rejects is retried image by image so the error lands on the file that caused it.
Class names from a labels file are used only when their number is the model's class
count (the length of the probabilities it answers): LabelsMismatch otherwise.

    .venv/bin/python -m serving.client --server http://127.0.0.1:8501 --model image_classifier a.jpg
"""
import dataclasses

import numpy as np

from common import signature
from common.user_errors import UserError
from serving.rest_client import ServerError

# The first bytes of each format tf.io.decode_image reads (the export's decoder).
IMAGE_SIGNATURES = {
    b"\xff\xd8\xff": "JPEG",            # SOI, then a marker
    b"\x89PNG\r\n\x1a\n": "PNG",
    b"GIF87a": "GIF", b"GIF89a": "GIF",
    b"BM": "BMP",
}
DECODED_FORMATS = "JPEG, PNG, GIF or BMP"


class LabelsMismatch(UserError):
    """A labels file whose number of names is not the model's class count."""


@dataclasses.dataclass
class ImageResult:
    file: str
    top: list = dataclasses.field(default_factory=list)  # [(class name, class id, probability)]
    error: str = None

    def to_json(self):
        return {"file": self.file, "error": self.error,
                "top_k": [{"class": name, "class_id": cid, "probability": p}
                          for name, cid, p in self.top]}


def read_labels(path):
    from common import dataset_files
    with open(path, encoding="utf-8") as f:
        return dataset_files.parse_labels(f.read(), source=path)


def image_format(data):
    """"JPEG", "PNG", "GIF" or "BMP" by the first bytes, or None."""
    return next((name for magic, name in IMAGE_SIGNATURES.items() if data.startswith(magic)), None)


def read_image(path):
    """(bytes, None) or (None, error message) for one file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return None, f"cannot read: {e.strerror or e}"
    if not data:
        return None, f"empty file, not an image ({DECODED_FORMATS})"
    if image_format(data) is None:
        return None, (f"not an image the model decodes ({DECODED_FORMATS}): starts with "
                      f"{data[:8]!r}")
    return data, None


def check_labels(labels, outputs, source):
    """LabelsMismatch unless labels has one name per class of the model's answer."""
    num_classes = np.shape(outputs[signature.OUTPUT_PROBABILITIES])[-1]
    if labels is not None and len(labels) != num_classes:
        raise LabelsMismatch(
            f"{source} has {len(labels)} class names but the model has {num_classes} classes "
            f"(the length of its {signature.OUTPUT_PROBABILITIES}): pass the labels.txt of the "
            f"dataset this model was trained on, or leave --labels out")


def top_k(outputs, row, k, labels=None):
    """[(class name, class id, probability)] for one image, most probable first.

    The model names its top class (`classes`); others come from labels or print as #id.
    """
    probabilities = np.asarray(outputs[signature.OUTPUT_PROBABILITIES][row], dtype=np.float64)
    top_id = int(outputs[signature.OUTPUT_CLASS_IDS][row])
    top_name = outputs[signature.OUTPUT_CLASSES][row]
    top_name = top_name.decode("utf-8") if isinstance(top_name, bytes) else str(top_name)
    order = np.argsort(-probabilities, kind="stable")[:k]
    def name_of(class_id):
        if labels is not None and class_id < len(labels):
            return labels[class_id]
        return top_name if class_id == top_id else f"#{class_id}"
    return [(name_of(int(i)), int(i), float(probabilities[i])) for i in order]


def classify_batch(client, items, k, labels, version, labels_source="labels"):
    """items: [(ImageResult, image bytes)]; fills each result.

    A batch rejected as bad input is retried image by image so the error lands
    on its file; other errors (unreachable, unknown model) raise ServerError, and labels
    that do not fit the model LabelsMismatch.
    """
    try:
        outputs = client.predict([jpeg for _, jpeg in items], version=version)
    except ServerError as e:
        if not is_bad_input(e):
            raise
        if len(items) == 1:
            items[0][0].error = str(e)
        for item in items if len(items) > 1 else ():
            classify_batch(client, [item], k, labels, version, labels_source)
        return
    check_labels(labels, outputs, labels_source)
    for row, (result, _) in enumerate(items):
        result.top = top_k(outputs, row, k, labels)


def is_bad_input(error):
    return error.status == 400 or getattr(error.status, "name", "") == "INVALID_ARGUMENT"


def classify_files(client, paths, k=3, labels=None, batch_size=32, version=None,
                   labels_source="labels"):
    """[ImageResult] in the order of paths; labels_source names the labels in an error."""
    results, pending = [], []
    for path in paths:
        result = ImageResult(path)
        data, result.error = read_image(path)
        results.append(result)
        if data is not None:
            pending.append((result, data))
    for start in range(0, len(pending), batch_size):
        classify_batch(client, pending[start:start + batch_size], k, labels, version, labels_source)
    return results
