"""Preprocessing: JPEGs listed in CSVs (or a label-folder tree) -> validated images -> sharded TFRecords and the dataset files, as a Beam pipeline; the bundled demo dataset."""
