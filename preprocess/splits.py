"""The deterministic train/eval split, shared by the pipeline and the demo data.

Kept free of Beam and TensorFlow imports so that small tools import it fast.

    python -m preprocess.splits 0.2 3/0012.jpg 7/0040.jpg      # prints each key's split
"""
import hashlib
import sys

TRAIN = "train"
EVAL = "eval"


def split_of(key, eval_fraction):
    """Deterministic train/eval assignment from a stable hash of ``key``.

    sha256 (not Python's hash(), which is salted per process) so that every run,
    worker and machine agrees; raising eval_fraction only moves rows train -> eval.
    A name that is not UTF-8 (surrogate-escaped by the reader) hashes its own bytes.
    """
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
    position = int.from_bytes(digest[:8], "big") / 2.0 ** 64  # uniform in [0, 1)
    return EVAL if position < eval_fraction else TRAIN


if __name__ == "__main__":
    for name in sys.argv[2:]:
        print(name, split_of(name, float(sys.argv[1])))
