"""The bundled demo dataset: scikit-learn's UCI handwritten digits as JPEG files.

1,797 scanned 8x8 digits (10 classes) ship inside scikit-learn's wheel, so the
demo needs no download. Each becomes DIR/<digit>/<index>.jpg, upscaled to
32x32, plus DIR/train.csv and DIR/eval.csv in the flowers format (uri,label)
with a fixed hash split. A rerun with the same settings returns at once.

    python -m preprocess.demo_data --output_dir work/demo/images
"""
import io
import json
import logging
import os

import numpy as np
from PIL import Image

from common import console
from common.user_errors import UserError
from preprocess import splits

# 8x8 -> 32x32: bicubic upscaling gives smooth strokes that JPEG keeps intact;
# 32 is also the trainer's smallest sensible input size.
IMAGE_SIZE = 32
# High quality: at 8x8 source detail, blockier JPEG artefacts would erase strokes.
JPEG_QUALITY = 95
# 20% eval (~360 images): enough to measure 97% accuracy to within about 1%.
EVAL_FRACTION = 0.2
# Bump when the files produced change, so that old output is rebuilt.
VERSION = 1
STAMP_FILE = "demo_data.json"


def digit_to_jpeg(pixels):
    """[8, 8] float in [0, 16] (16 = ink) -> RGB JPEG bytes of IMAGE_SIZE x IMAGE_SIZE."""
    gray = np.clip(pixels * (255.0 / 16.0), 0, 255).astype(np.uint8)
    image = Image.fromarray(gray, mode="L").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BICUBIC)
    buffer = io.BytesIO()
    # RGB (3 equal planes): the pipeline then keeps these bytes as they are.
    image.convert("RGB").save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def load_digits():
    """-> ([n, 8, 8] float images, [n] int labels) from scikit-learn's bundled copy."""
    from sklearn.datasets import load_digits as sklearn_load_digits  # the "demo" extra
    digits = sklearn_load_digits()
    return digits.images, digits.target


def write_images(output_dir, images, labels):
    """Writes every JPEG; returns [(absolute path, label string, relative path)]."""
    rows = []
    for index, (pixels, label) in enumerate(zip(images, labels)):
        relative = f"{label}/{index:04d}.jpg"
        path = os.path.abspath(os.path.join(output_dir, relative))  # CSVs work from any cwd
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(digit_to_jpeg(pixels))
        rows.append((path, str(label), relative))
    return rows


def write_csvs(output_dir, rows):
    """train.csv / eval.csv, split by the same hash the pipeline uses for one CSV."""
    lines = {splits.TRAIN: [], splits.EVAL: []}
    for path, label, relative in rows:
        lines[splits.split_of(relative, EVAL_FRACTION)].append(f"{path},{label}\n")
    for split, split_lines in lines.items():
        with open(os.path.join(output_dir, f"{split}.csv"), "w") as f:
            f.writelines(split_lines)
    return {split: len(split_lines) for split, split_lines in lines.items()}


def expected_stamp(output_dir):
    return {"version": VERSION, "image_size": IMAGE_SIZE, "jpeg_quality": JPEG_QUALITY,
            "eval_fraction": EVAL_FRACTION, "output_dir": os.path.abspath(output_dir)}


def is_complete(output_dir):
    """True when a previous run with the same settings finished writing everything."""
    path = os.path.join(output_dir, STAMP_FILE)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        stamp = json.load(f)
    return {k: stamp.get(k) for k in expected_stamp(output_dir)} == expected_stamp(output_dir)


def build_demo_data(output_dir):
    """Writes the dataset unless it is already complete; returns the split sizes."""
    if is_complete(output_dir):
        with open(os.path.join(output_dir, STAMP_FILE)) as f:
            counts = json.load(f)["counts"]
        logging.debug("Demo data already complete in %s: %s", output_dir, counts)
        return counts
    os.makedirs(output_dir, exist_ok=True)
    images, labels = load_digits()
    counts = write_csvs(output_dir, write_images(output_dir, images, labels))
    # The stamp is written last: an interrupted run has none and is redone.
    with open(os.path.join(output_dir, STAMP_FILE), "w") as f:
        json.dump(dict(expected_stamp(output_dir), counts=counts), f, indent=2)
    logging.debug("Wrote %d digit JPEGs to %s: %s", len(labels), output_dir, counts)
    return counts


class DemoDataError(UserError):
    """An output directory the demo dataset cannot be written to."""


def build_demo_data_or_explain(output_dir):
    """build_demo_data; DemoDataError (one line) when the directory cannot be written."""
    try:
        return build_demo_data(output_dir)
    except OSError as err:  # a file where the folder should be, no permission, a full disk
        raise DemoDataError(f"--output_dir {output_dir}: cannot write the demo dataset there "
                            f"({err.strerror or err}: {err.filename or output_dir})") from None


def main(argv=None):
    parser = console.ArgumentParser(prog="python -m preprocess.demo_data",
                                    description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    counts = console.exit_on_user_error(build_demo_data_or_explain, args.output_dir)
    print(f"demo data in {args.output_dir}: {counts['train']} train, {counts['eval']} eval")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    main()
