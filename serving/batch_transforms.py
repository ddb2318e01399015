"""The Beam side of serving/batch_predict.py: RunInference over an export, records, files.

Imports Beam and TensorFlow, so the entry point imports this module only once its flags
have parsed (--help stays fast).

    .venv/bin/python -m serving.batch_predict --help     # the command; this module is its pipeline
"""
import hashlib
import typing

import apache_beam as beam
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.ml.inference import base as inference_base
from apache_beam.ml.inference.base import (
    KeyedModelHandler, ModelHandler, PredictionResult, RunInference)

from common import export_predictor, prediction_inputs, prediction_records

# Beam 2.77 imports the standard `resource` module in one try with its torch-based
# ModelManager, so without torch (.venv-keras) it takes `resource` to be missing: RunInference
# then warns "Resource module is not available ..." for every batch and reports its memory as 0.
# The module is there on Linux: hand it back.
if inference_base.__dict__.get("resource", ...) is None:
    import resource
    inference_base.resource = resource

METRICS_NAMESPACE = "batch_predict"
ERRORS_TAG = "errors"
# Counter names for labelled inputs: "pair<SEP>true<SEP>predicted" per outcome, and the
# labels the model does not know (they cannot be right; kept out of the accuracy).
PAIR_COUNTER, PAIR_SEP, UNKNOWN_LABEL_COUNTER = "pair", "\t", "label_unknown"


class SavedModelHandler(ModelHandler):
    """RunInference's extension point for an Estimator export: image bytes in, probabilities out.

    Beam's own TFModelHandlerTensor loads with tf.keras.models.load_model, which
    does not load an Estimator's TF1-style export, and importing Beam's
    tensorflow_inference module needs tensorflow-hub (whose tf-keras pulls a
    newer TensorFlow). This handler needs neither: it loads the SavedModel's
    serving signature with common/export_predictor.py. Batching is Beam's
    (min_batch_size / max_batch_size, through BatchElements).
    """

    def __init__(self, export_dir, *, min_batch_size=None, max_batch_size=None):
        super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size)
        self._export_dir = export_dir

    def load_model(self):
        return export_predictor.load_export(self._export_dir)

    def run_inference(self, batch, model, inference_args=None):
        """One PredictionResult per image; inference = (probabilities [C], class names)."""
        probabilities = export_predictor.predict_probabilities(model, batch)
        return [PredictionResult(jpeg, (row, model.labels)) for jpeg, row in zip(batch, probabilities)]

    def get_num_bytes(self, batch):
        return sum(len(jpeg) for jpeg in batch)

    def get_metrics_namespace(self):
        return METRICS_NAMESPACE


class LoadImages(beam.DoFn):
    """(uri, label) or InputImage -> ((uri, label), checked image bytes); unusable ones go to
    errors, counted."""

    def process(self, item):
        image = (item if isinstance(item, prediction_inputs.InputImage)
                 else prediction_inputs.load_uri(*item))
        if image.error:
            Metrics.counter(METRICS_NAMESPACE, f"error_{image.error[0]}").inc()
            yield beam.pvalue.TaggedOutput(ERRORS_TAG, prediction_records.make_error_record(
                image.uri, *image.error, label=image.label))
            return
        yield (image.uri, image.label), image.jpeg


def make_record(keyed_result, top_k):
    (uri, label), result = keyed_result
    probabilities, labels = result.inference
    Metrics.counter(METRICS_NAMESPACE, "predicted").inc()
    record = prediction_records.make_prediction_record(uri, probabilities, labels, top_k, label)
    if label is not None and label not in labels:
        Metrics.counter(METRICS_NAMESPACE, UNKNOWN_LABEL_COUNTER).inc()
    elif label is not None:
        Metrics.counter(METRICS_NAMESPACE, PAIR_SEP.join([PAIR_COUNTER, label, record["class"]])).inc()
    return record


class PredictImages(beam.PTransform):
    """PCollection of (uri, label) or InputImages -> PCollection of records, one per input."""

    def __init__(self, model_handler, top_k):
        super().__init__()
        self._model_handler = model_handler
        self._top_k = top_k

    def expand(self, uris):
        loaded = (uris | "Spread" >> beam.Reshuffle()
                  | "LoadImages" >> beam.ParDo(LoadImages()).with_outputs(ERRORS_TAG, main="images"))
        predicted = (loaded.images
                     | "RunInference" >> RunInference(KeyedModelHandler(self._model_handler))
                     | "Format" >> beam.Map(make_record, self._top_k))
        return (predicted, loaded[ERRORS_TAG]) | "AllRecords" >> beam.Flatten()


def write_records(records, output, output_format):
    """JSON-lines shards OUTPUT-NNNNN-of-NNNNN.jsonl, or one OUTPUT.csv with a header."""
    if output_format == "csv":
        return (records | "ToCsv" >> beam.Map(prediction_records.to_csv_line)
                | "WriteCsv" >> beam.io.WriteToText(
                    output, file_name_suffix=".csv", num_shards=1, shard_name_template="",
                    header=",".join(prediction_records.CSV_COLUMNS)))
    return (records | "ToJson" >> beam.Map(prediction_records.to_json_line)
            | "WriteJsonl" >> beam.io.WriteToText(output, file_name_suffix=".jsonl"))


def image_from_record(record):
    """InputImage of a TFRecord; a record without image/filename is named by its hash."""
    return prediction_inputs.image_from_record(record, f"tfrecord:{hashlib.sha1(record).hexdigest()[:16]}")


def read_inputs(pipeline, args):
    """PCollection of (uri, label) (--input_csv, --input_images) or InputImages (--input_tfrecord)."""
    if args.input_tfrecord:
        return (pipeline | "ReadTFRecords" >> beam.io.ReadFromTFRecord(args.input_tfrecord)
                | "ParseRecords" >> beam.Map(image_from_record))
    if args.input_images:  # listed by the launcher (batch_predict.check_inputs)
        return pipeline | "ListImages" >> beam.Create([(uri, None) for uri in args.image_files])
    # Any: the lines give (uri, label) tuples and InputImage errors (a malformed line, a
    # header), and the tuple coder Beam infers from the generator would refuse the latter.
    return (pipeline | "CsvPath" >> beam.Create([args.input_csv])
            | "ReadUris" >> beam.FlatMap(prediction_inputs.read_csv_uris).with_output_types(typing.Any))


def build_pipeline(pipeline, args, staged_prefix):
    uris = read_inputs(pipeline, args)
    handler = SavedModelHandler(args.model_dir, min_batch_size=args.min_batch_size,
                                max_batch_size=args.max_batch_size)
    records = uris | "Predict" >> PredictImages(handler, args.top_k)
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
