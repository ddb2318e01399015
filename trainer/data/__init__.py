"""Dataset readers: the input pipeline, your own TFRecords, data checks before a run."""
