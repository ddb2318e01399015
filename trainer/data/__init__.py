"""Dataset readers: the input pipeline, the dataset files (labels, class count, split sizes), your own TFRecords, data checks before a run."""
