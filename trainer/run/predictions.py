"""--mode predict with either engine: every input image classified once, one record each, written whole.

Reads a CSV of image URIs ('uri[,label]', the pipeline's format), a folder or glob of
images, or a TFRecord glob (common/prediction_inputs.py), checks every image with serving's decoder in Python
first, then classifies the usable ones with the engine's checkpoint through the
evaluation image path (the engine's predict_fn: TPUEstimator.predict,
trainer/estimator/predict.py; Keras' model.predict, trainer/keras/predict.py) or, with
--predict_export_dir, with that export (common/export_predictor.py). An unreadable or
corrupt image gets an error record; records go to OUT/predictions unless
--predict_output_dir says otherwise (common/prediction_records.py), staged and moved into
place only when complete. The run holds that directory's predictions.lock from before
any image is read or the model loads (trainer/settings/early_check.py held_output; the lock a
Beam job with --output DIR/predictions takes too): a second run into it is refused at once in
one line, exit 2 (before TensorFlow loads where the early check sees it). An input that
gives no usable image is one line (exit 2 from trainer.task) and nothing is written.

    .venv/bin/python -m trainer.task --mode predict --output_dir work/demo/run \\
        --predict_input work/demo/images/eval.csv [--predict_format csv] [--engine keras]
    .venv/bin/python -m trainer.task --mode predict --output_dir work/demo/run \
        --predict_input 'work/demo/images/3/*.jpg'       # or a folder: work/demo/images/3
"""
import collections
import json
import logging

from common import export_predictor, export_versions, prediction_inputs, prediction_records
from common.chunks import split_into_chunks
from trainer.settings import early_check, table


def load_predictor(params, checkpoint_path):
    """The named export (loaded once), or None to predict from checkpoint_path."""
    if params["predict_export_dir"]:
        export_dir, version = export_versions.resolve_export_dir(params["predict_export_dir"])
        logging.getLogger(__name__).info("Predicting with version %s of %s", version,
                                         params["predict_export_dir"])
        return export_predictor.load_export(export_dir)
    if checkpoint_path is None:
        raise FileNotFoundError(f"output_dir={params['output_dir']!r} has no checkpoint to predict "
                                f"with; train first or pass --predict_export_dir")
    return None


def classify_chunks(predict_fn, params, checkpoint_path, export, jpeg_chunks):
    """Per chunk of jpeg_chunks, in order: its probabilities (None for an empty chunk), and
    the class names: from the loaded export, or from the checkpoint in one predict_fn run."""
    if export is None:
        return predict_fn(jpeg_chunks, checkpoint_path), params["labels"]
    batch_size = params["predict_batch_size"]
    return (export_predictor.predict_in_batches(export, jpegs, batch_size) if jpegs else None
            for jpegs in jpeg_chunks), export.labels


def make_records(images, probabilities, labels, top_k):
    """One record per input, in input order: a prediction or an error."""
    rows = iter(probabilities if probabilities is not None else [])
    records = []
    for image in images:
        if image.error:
            records.append(prediction_records.make_error_record(image.uri, *image.error,
                                                                label=image.label))
        else:
            records.append(prediction_records.make_prediction_record(
                image.uri, next(rows), labels, top_k, label=image.label))
    return records


def run_predict(predict_fn, params, checkpoint_path):
    """Classifies params["predict_input"] under the output's lock (early_check.held_output, which
    refused a held one before TensorFlow loaded, if it could); writes the records; returns the
    summary dict.

    predict_fn(jpeg_chunks, checkpoint_path) -> per chunk, in order, float32
    [len(jpegs), num_classes] (None for an empty chunk), each row once: one model load (one
    predict call) for the run, reading jpeg_chunks, a lazy iterable of lists of JPEG bytes,
    as it goes. Images are read and checked predict_chunk_images at a time: host memory
    holds about one chunk, however long the input. Only the small records accumulate.
    """
    with early_check.held_output(params):
        return predict_and_write(predict_fn, params, checkpoint_path)


def predict_and_write(predict_fn, params, checkpoint_path):
    images_in = prediction_inputs.read_inputs(params["predict_input"])  # checked before the model
    export = load_predictor(params, checkpoint_path)
    records = []
    pending = collections.deque()  # each chunk's images, from its reading to its probabilities

    def jpeg_chunks():  # read as the model asks for images, maybe in the input pipeline's thread
        for images in split_into_chunks(images_in, params["predict_chunk_images"]):
            jpegs = [image.jpeg for image in images if not image.error]
            logging.info("Predicting %d images (%d unusable; %d done) from %s", len(jpegs),
                         len(images) - len(jpegs), len(records),
                         params["predict_export_dir"] or checkpoint_path)
            pending.append(images)
            yield jpegs

    chunks, labels = classify_chunks(predict_fn, params, checkpoint_path, export, jpeg_chunks())
    for probabilities in chunks:
        records += make_records(pending.popleft(), probabilities, labels, params["top_k"])
    if pending:
        raise RuntimeError(f"predict gave no probabilities for {len(pending)} chunk(s) of images")
    return write_summary(records, params, labels)


def write_summary(records, params, class_names):
    """Writes the records (only when some image was classified) and prints their summary."""
    counts = prediction_records.summarize(records)
    prediction_inputs.check_some_usable(f"--predict_input {params['predict_input']}",
                                        counts["images"], counts["errors"])
    output_dir = table.predict_output_dir(params)
    summary = prediction_records.write_records(
        records, output_dir, params["predict_format"], params["predict_records_per_shard"],
        class_names=class_names)
    summary["output_dir"] = output_dir
    logging.info("Prediction summary: %s", json.dumps(summary, sort_keys=True))
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary
