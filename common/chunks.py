"""Splitting a stream into lists of a few items: pure Python, no TensorFlow, so the
Beam pipeline (preprocess/transforms.py) and batch prediction (trainer/estimator/predict.py)
share it.

    python -m common.chunks 10 4        # [0, 1, 2, 3] [4, 5, 6, 7] [8, 9]
"""
import sys


def split_into_chunks(items, size):
    """Lists of at most ``size`` consecutive items, lazily: one chunk in memory at a time."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def main(argv):
    count, size = int(argv[1]), int(argv[2])
    print(*split_into_chunks(range(count), size))


if __name__ == "__main__":
    main(sys.argv)
