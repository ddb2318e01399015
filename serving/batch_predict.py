"""Entry point: batch prediction on many CPU machines with Beam's RunInference.

Reads the image URIs of a CSV ('uri[,label]', the pipeline's format) or the
JPEGs of TFRecords (--input_tfrecord GLOB), loads and checks each image (common/prediction_inputs.py; bad ones become error records and
counters), runs the exported SavedModel through apache_beam.ml.inference's
RunInference with SavedModelHandler, and writes one JSON line (or CSV row) per
input image (common/prediction_records.py, the same records as trainer/estimator/predict.py).
A run's output replaces the earlier run's of the same --output and --format as a
whole: those files are deleted before the pipeline starts (a log line says how
many); files of the other format are kept, and a warning names them.

    .venv/bin/python -m serving.batch_predict --input_csv work/demo/images/eval.csv \\
        --model_dir work/demo/run/export/image_classifier/1500 --output /tmp/preds/predictions
    .venv/bin/python -m serving.batch_predict --input_csv gs://B/images.csv \\
        --model_dir gs://B/run/export/image_classifier/1500 --output gs://B/preds/predictions \\
        --runner DataflowRunner --project P --region us-central1 --temp_location gs://B/tmp

Runs offline on every local core by default, configured exactly as the
preprocessing pipeline (common/beam_pipeline.py); every option not
defined here is a Beam pipeline option (--runner, --max_num_workers, ...).
"""
import hashlib
import json
import logging
import sys

from common import console

console.quiet_unless_verbose()  # before Beam and TensorFlow load: they read the environment once

import apache_beam as beam  # noqa: E402
from apache_beam.metrics.metric import Metrics, MetricsFilter  # noqa: E402
from apache_beam.ml.inference.base import (  # noqa: E402
    KeyedModelHandler, ModelHandler, PredictionResult, RunInference)

from common import (  # noqa: E402
    beam_pipeline, export_predictor, prediction_inputs, prediction_records)

METRICS_NAMESPACE = "batch_predict"
# RunInference's largest batch: 128 images of ~100 KB keep a batch near 13 MB,
# the size the trainer's evaluation batches have, and fill a CPU's cores.
DEFAULT_MAX_BATCH_SIZE = 128
ERRORS_TAG = "errors"
_LOGGER = logging.getLogger(__name__)


class SavedModelHandler(ModelHandler):
    """RunInference's extension point for an Estimator export: JPEG bytes in, probabilities out.

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
        """One PredictionResult per JPEG; inference = (probabilities [C], class names)."""
        probabilities = export_predictor.predict_probabilities(model, batch)
        return [PredictionResult(jpeg, (row, model.labels)) for jpeg, row in zip(batch, probabilities)]

    def get_num_bytes(self, batch):
        return sum(len(jpeg) for jpeg in batch)

    def get_metrics_namespace(self):
        return METRICS_NAMESPACE


# Counter names for labelled inputs: "pair<SEP>true<SEP>predicted" per outcome, and the
# labels the model does not know (they cannot be right; kept out of the accuracy).
PAIR_COUNTER, PAIR_SEP, UNKNOWN_LABEL_COUNTER = "pair", "\t", "label_unknown"


class LoadImages(beam.DoFn):
    """(uri, label) or InputImage -> ((uri, label), checked JPEG bytes); unusable ones go to
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
    """PCollection of URIs or InputImages -> PCollection of records, one per input."""

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


def make_parser():
    parser = console.ArgumentParser(prog="python -m serving.batch_predict",
                                    description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="count", dest="verbosity",
                        help="also show Beam's and TensorFlow's INFO lines (-vv: debug)")
    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--input_csv", help="CSV of 'uri[,label]' lines")
    inputs.add_argument("--input_tfrecord", help="glob of TFRecords (common/record_schema.py schema)")
    parser.add_argument("--model_dir", required=True,
                        help="OUT/export/<model_name> (its highest version) or a version directory")
    parser.add_argument("--output", required=True, help="output path prefix")
    parser.add_argument("--format", default="jsonl", choices=prediction_records.FORMATS)
    parser.add_argument("--top_k", type=int, default=prediction_records.DEFAULT_TOP_K)
    parser.add_argument("--min_batch_size", type=int, default=1)
    parser.add_argument("--max_batch_size", type=int, default=DEFAULT_MAX_BATCH_SIZE)
    return parser


def parse_args(argv):
    parser = make_parser()
    args, pipeline_args = parser.parse_known_args(argv)
    beam_pipeline.check_pipeline_flags(
        console.strip_verbosity_flags(pipeline_args), parser._option_string_actions)
    if args.top_k < 1:
        raise ValueError(f"--top_k={args.top_k} must be >= 1")
    if not 1 <= args.min_batch_size <= args.max_batch_size:
        raise ValueError(f"--min_batch_size={args.min_batch_size} must be in "
                         f"[1, --max_batch_size={args.max_batch_size}]")
    base = args.model_dir
    args.model_dir, version = export_predictor.resolve_export_dir(base)
    _LOGGER.info("Model: version %s of %s (%s)", version, base.rstrip("/"), args.model_dir)
    return args, pipeline_args


def image_from_record(record):
    """InputImage of a TFRecord; a record without image/filename is named by its hash."""
    return prediction_inputs.image_from_record(record, f"tfrecord:{hashlib.sha1(record).hexdigest()[:16]}")


def read_inputs(pipeline, args):
    """PCollection of URIs (from --input_csv) or of InputImages (from --input_tfrecord)."""
    if args.input_tfrecord:
        return (pipeline | "ReadTFRecords" >> beam.io.ReadFromTFRecord(args.input_tfrecord)
                | "ParseRecords" >> beam.Map(image_from_record))
    return (pipeline | "CsvPath" >> beam.Create([args.input_csv])
            | "ReadUris" >> beam.FlatMap(prediction_inputs.read_csv_uris))


def build_pipeline(pipeline, args):
    uris = read_inputs(pipeline, args)
    handler = SavedModelHandler(args.model_dir, min_batch_size=args.min_batch_size,
                                max_batch_size=args.max_batch_size)
    records = uris | "Predict" >> PredictImages(handler, args.top_k)
    return write_records(records, args.output, args.format)


def summarize_metrics(result):
    """{"predicted": n, "errors": {reason: n}} from the job's counters, plus accuracy and
    the confusion counts when the inputs carried labels (prediction_records.summarize_labelled)."""
    counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    values = {c.key.metric.name: c.committed or c.attempted or 0 for c in counters}
    errors = {name[len("error_"):]: n for name, n in sorted(values.items()) if name.startswith("error_")}
    pairs = {tuple(name.split(PAIR_SEP)[1:]): n for name, n in values.items()
             if name.startswith(PAIR_COUNTER + PAIR_SEP)}
    summary = {"predicted": values.get("predicted", 0), "errors": errors}
    summary.update(prediction_records.summarize_labelled(pairs))
    if summary.get("labelled") is not None or values.get(UNKNOWN_LABEL_COUNTER):
        summary["unknown_labels"] = values.get(UNKNOWN_LABEL_COUNTER, 0)
    return summary


def run(argv=None):
    """Runs the job to completion; returns the summary dict it prints."""
    return run_job(*parse_args(argv))


def run_job(args, pipeline_args):
    options = beam_pipeline.build_pipeline_options(pipeline_args)
    # The shards of an earlier run with another shard count would match PREFIX-* too.
    prediction_records.remove_earlier_outputs(args.output, args.format)
    result = beam_pipeline.run_to_completion(lambda pipeline: build_pipeline(pipeline, args), options)
    summary = summarize_metrics(result)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


def main(argv=None):
    """The command: run(), with a bad flag value as one "error:" line and exit code 2."""
    try:
        args, pipeline_args = parse_args(argv)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run_job(args, pipeline_args)
    return 0


if __name__ == "__main__":
    beam_pipeline.configure_logging()
    sys.exit(main())
