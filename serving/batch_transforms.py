"""The Beam side of serving/batch_predict.py: RunInference over an export, records, files.

Imports Beam and TensorFlow, so the entry point imports this module only once its flags
have parsed (--help stays fast).

    .venv/bin/python -m serving.batch_predict --help     # the command; this module is its pipeline
"""
import collections
import hashlib
import typing

import apache_beam as beam
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.ml.inference import base as inference_base
from apache_beam.ml.inference.base import (
    KeyedModelHandler, ModelHandler, PredictionResult, RunInference)

from common import export_predictor, prediction_inputs, prediction_records
from common.chunks import split_into_chunks

# Beam 2.77 imports the standard `resource` module in one try with its torch-based
# ModelManager, so without torch (.venv-keras) it takes `resource` to be missing: RunInference
# then warns "Resource module is not available ..." for every batch and reports its memory as 0.
# The module is there on Linux: hand it back.
if inference_base.__dict__.get("resource", ...) is None:
    import resource
    inference_base.resource = resource

METRICS_NAMESPACE = "batch_predict"
# A CSV or a list of images is cut into Beam elements of this many model batches
# (--max_batch_size each) as it is read: Beam's work per element (a WindowedValue, the
# invoker's argument matching, RunInference's timing and counters) and each switch between
# loading images and the model are paid per element, not per batch (docs/benchmarks.md, batch
# prediction). 8 batches of 128 photos of ~100 KB keep an element near 100 MB; a Reshuffle
# still spreads a file read by one worker over all of them, 1,024 images at a time.
BATCHES_PER_ELEMENT = 8
ERRORS_TAG = "errors"
# Counter names for labelled inputs: "pair<SEP>true<SEP>predicted" per outcome, and the
# labels the model does not know (they cannot be right; kept out of the accuracy).
PAIR_COUNTER, PAIR_SEP, UNKNOWN_LABEL_COUNTER = "pair", "\t", "label_unknown"


class SavedModelHandler(ModelHandler):
    """RunInference's extension point for an Estimator export: lists of image bytes in,
    probabilities out, batch_size images per model call.

    Beam's own TFModelHandlerTensor loads with tf.keras.models.load_model, which
    does not load an Estimator's TF1-style export, and importing Beam's
    tensorflow_inference module needs tensorflow-hub (whose tf-keras pulls a
    newer TensorFlow). This handler needs neither: it loads the SavedModel's
    serving signature with common/export_predictor.py. Each element it is given is a
    list of images (a list of bytes) cut before the images load (read_inputs), so every step
    after it handles one element per list, not per image: Beam's per-element work is the
    cost that grows with the input. The model sees batch_size images at a time.
    """

    def __init__(self, export_dir, batch_size):
        super().__init__(min_batch_size=1, max_batch_size=1)  # an element is a list already
        self._export_dir = export_dir
        self._batch_size = batch_size

    def load_model(self):
        return export_predictor.load_export(self._export_dir)

    def run_inference(self, batch, model, inference_args=None):
        """One PredictionResult per list of images; inference = (probabilities [n, C], class names)."""
        return [PredictionResult(jpegs, (export_predictor.predict_in_batches(
            model, jpegs, self._batch_size), model.labels)) for jpegs in batch]

    def get_num_bytes(self, batch):
        return sum(len(jpeg) for jpegs in batch for jpeg in jpegs)

    def get_metrics_namespace(self):
        return METRICS_NAMESPACE


class LoadImages(beam.DoFn):
    """A batch of (uri, label) or InputImages -> ([(uri, label), ...], [checked image bytes, ...])
    for its usable images; each unusable one goes to errors (a list of its one record), counted."""

    def process(self, items):
        keys, jpegs = [], []
        for item in items:
            image = (item if isinstance(item, prediction_inputs.InputImage)
                     else prediction_inputs.load_uri(*item))
            if image.error:
                Metrics.counter(METRICS_NAMESPACE, f"error_{image.error[0]}").inc()
                yield beam.pvalue.TaggedOutput(ERRORS_TAG, [prediction_records.make_error_record(
                    image.uri, *image.error, label=image.label)])
                continue
            keys.append((image.uri, image.label))
            jpegs.append(image.jpeg)
        if jpegs:
            yield keys, jpegs


def make_records(keyed_result, top_k):
    """The records of one batch's predictions, counted (predicted, and label pairs)."""
    keys, result = keyed_result
    probabilities, labels = result.inference
    records = [prediction_records.make_prediction_record(uri, row, labels, top_k, label)
               for (uri, label), row in zip(keys, probabilities)]
    Metrics.counter(METRICS_NAMESPACE, "predicted").inc(len(records))
    unknown = [r for r in records if "label" in r and r["label"] not in labels]
    if unknown:
        Metrics.counter(METRICS_NAMESPACE, UNKNOWN_LABEL_COUNTER).inc(len(unknown))
    pairs = collections.Counter((r["label"], r["class"]) for r in records
                                if "label" in r and r["label"] in labels)
    for pair, count in pairs.items():
        Metrics.counter(METRICS_NAMESPACE, PAIR_SEP.join([PAIR_COUNTER, *pair])).inc(count)
    return records


class PredictImages(beam.PTransform):
    """PCollection of batches (lists) of (uri, label) or InputImages -> PCollection of lists of
    records: every input's record in one of them (a batch's predictions, or one error).
    is_spread: the batches are spread over the workers first (Reshuffle): a file read by
    one worker is classified by all of them; with a single worker that is only a cost."""

    def __init__(self, model_handler, top_k, is_spread=True):
        super().__init__()
        self._model_handler = model_handler
        self._top_k = top_k
        self._is_spread = is_spread

    def expand(self, batches):
        if self._is_spread:
            batches = batches | "Spread" >> beam.Reshuffle()
        loaded = batches | "LoadImages" >> beam.ParDo(LoadImages()).with_outputs(
            ERRORS_TAG, main="images")
        predicted = (loaded.images
                     | "RunInference" >> RunInference(KeyedModelHandler(self._model_handler))
                     | "Format" >> beam.Map(make_records, self._top_k))
        return (predicted, loaded[ERRORS_TAG]) | "AllRecords" >> beam.Flatten()


def as_lines(records, to_line):
    """One text block of records (a line each): written as one element, it gives their lines."""
    return "\n".join(to_line(record) for record in records)


def write_records(records, output, output_format):
    """JSON-lines shards OUTPUT-NNNNN-of-NNNNN.jsonl, or one OUTPUT.csv with a header, from
    lists of records."""
    if output_format == "csv":
        return (records | "ToCsv" >> beam.Map(as_lines, prediction_records.to_csv_line)
                | "WriteCsv" >> beam.io.WriteToText(
                    output, file_name_suffix=".csv", num_shards=1, shard_name_template="",
                    header=",".join(prediction_records.CSV_COLUMNS)))
    return (records | "ToJson" >> beam.Map(as_lines, prediction_records.to_json_line)
            | "WriteJsonl" >> beam.io.WriteToText(output, file_name_suffix=".jsonl"))


def image_from_record(record):
    """InputImage of a TFRecord; a record without image/filename is named by its hash."""
    return prediction_inputs.image_from_record(record, f"tfrecord:{hashlib.sha1(record).hexdigest()[:16]}")


def read_inputs(pipeline, args):
    """PCollection of lists of (uri, label) (--input_csv, --input_images) or of InputImages
    (--input_tfrecord). A CSV or a list of images is cut into lists of BATCHES_PER_ELEMENT
    model batches as it is read (no Beam element per image); TFRecords are batched by
    Beam's BatchElements (--min_batch_size to --max_batch_size)."""
    size = args.max_batch_size * BATCHES_PER_ELEMENT
    if args.input_tfrecord:
        return (pipeline | "ReadTFRecords" >> beam.io.ReadFromTFRecord(args.input_tfrecord)
                | "ParseRecords" >> beam.Map(image_from_record)
                | "Batch" >> beam.BatchElements(min_batch_size=args.min_batch_size,
                                                max_batch_size=args.max_batch_size))
    if args.input_images:  # listed by the launcher (batch_predict.check_inputs)
        return pipeline | "ListImages" >> beam.Create(
            list(split_into_chunks([(uri, None) for uri in args.image_files], size)))
    # Any: the lines give (uri, label) tuples and InputImage errors (a malformed line, a
    # header), and the tuple coder Beam infers from the generator would refuse the latter.
    return (pipeline | "CsvPath" >> beam.Create([args.input_csv])
            | "ReadUris" >> beam.FlatMap(read_csv_batches, size).with_output_types(typing.Any))


def read_csv_batches(path, size):
    """Lists of up to size items of prediction_inputs.read_csv_uris(path), in file order."""
    return split_into_chunks(prediction_inputs.read_csv_uris(path), size)


def build_pipeline(pipeline, args, staged_prefix):
    from common import beam_pipeline
    batches = read_inputs(pipeline, args)
    records = batches | "Predict" >> PredictImages(
        SavedModelHandler(args.model_dir, args.max_batch_size), args.top_k,
        is_spread=not beam_pipeline.has_one_worker(pipeline.options))
    return write_records(records, staged_prefix, args.format)


def summarize_metrics(result):
    """{"images", "predicted", "errors": {reason: n}} from the job's counters, plus accuracy and
    the confusion counts when the inputs carried labels (prediction_records.summarize_labelled)."""
    counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    values = {c.key.metric.name: c.committed or c.attempted or 0 for c in counters}
    errors = {name[len("error_"):]: n for name, n in sorted(values.items()) if name.startswith("error_")}
    pairs = {tuple(name.split(PAIR_SEP)[1:]): n for name, n in values.items()
             if name.startswith(PAIR_COUNTER + PAIR_SEP)}
    predicted = values.get("predicted", 0)
    summary = {"images": predicted + sum(errors.values()), "predicted": predicted, "errors": errors}
    summary.update(prediction_records.summarize_labelled(pairs))
    if summary.get("labelled") is not None or values.get(UNKNOWN_LABEL_COUNTER):
        summary["unknown_labels"] = values.get(UNKNOWN_LABEL_COUNTER, 0)
    return summary
