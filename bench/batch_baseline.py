"""The like-for-like baseline of bench_batch_predict: the batch routes' work, in one plain loop.

What either route does for its output, and nothing more: take the output's lock
(prediction_records.hold_prefix, the lock both routes take), read and check every input
(common/prediction_inputs.py), load the export, call its serving signature in batches
(common/export_predictor.py), make one record per input (a prediction or an error) and
write the records and their summary, staged and then published
(prediction_records.write_records), as trainer.task --mode predict writes them.

    .venv/bin/python -m bench.batch_baseline EXPORT_DIR images.csv OUT_DIR   # prints the summary
"""
import json
import sys

from common import export_predictor, prediction_inputs, prediction_records, signature
from common.chunks import split_into_chunks
from trainer.settings import table

RECORDS_PER_SHARD = table.DEFAULTS["predict_records_per_shard"]
CHUNK_IMAGES = table.DEFAULTS["predict_chunk_images"]


def make_records(images, probabilities, labels, top_k):
    """One record per input, in input order: a prediction or an error."""
    rows = iter(probabilities)
    return [prediction_records.make_error_record(image.uri, *image.error, label=image.label)
            if image.error else
            prediction_records.make_prediction_record(image.uri, next(rows), labels, top_k,
                                                      label=image.label)
            for image in images]


def predict_in_process(export_dir, input_path, output_dir, batch_size,
                       top_k=signature.DEFAULT_TOP_K, output_format="jsonl"):
    """Classifies every input of input_path with the export into output_dir (predictions-*
    and summary.json, as --mode predict writes them) under its lock; returns the summary."""
    prefix = prediction_records.prediction_prefix(output_dir)
    with prediction_records.hold_prefix(prefix, "--output", output_dir):
        images_in = prediction_inputs.read_inputs(input_path)
        export = export_predictor.load_export(export_dir)
        records = []
        for images in split_into_chunks(images_in, CHUNK_IMAGES):
            jpegs = [image.jpeg for image in images if not image.error]
            probabilities = export_predictor.predict_in_batches(export, jpegs, batch_size)
            records += make_records(images, probabilities, export.labels, top_k)
        prediction_inputs.check_some_usable(input_path, len(records),
                                            prediction_records.summarize(records)["errors"])
        return prediction_records.write_records(records, output_dir, output_format,
                                                RECORDS_PER_SHARD, class_names=export.labels)


def main(argv):
    summary = predict_in_process(argv[1], argv[2], argv[3], batch_size=64)
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv)
