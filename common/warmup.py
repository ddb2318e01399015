"""TF Serving warmup requests: `assets.extra/tf_serving_warmup_requests` in an export.

TF Serving replays these records when it loads a version, before it reports the
version AVAILABLE, so the first real request does not pay for graph
initialisation. The file is a TFRecord of `PredictionLog` protos (one
`predict_log.request` each), the format TF Serving's saved_model_warmup reads.

    .venv/bin/python -m common.warmup OUT/export/image_classifier/1 a.jpg b.jpg

TensorFlow (and TF Serving's protos, which load it) are imported where a file is read
or written, so that the command's --help and mistakes answer at once.
"""
import os

# The "serving" extra: without it this import fails, and the trainer skips warmup
# (trainer/export/staging.py). The package itself loads no TensorFlow.
import tensorflow_serving  # noqa: F401

from common import console, signature
from common.user_errors import UserError

# TF Serving refuses a warmup file with more records than this (saved_model_warmup.cc).
MAX_WARMUP_RECORDS = 1000


class WarmupError(UserError):
    """An export directory, JPEG list or file that cannot make a warmup file."""


def make_warmup_requests(jpeg_bytes_list, model_name, signature_names):
    """One batch-of-1 request per image per signature, plus one request with the whole batch.

    Batch 1 is what interactive clients send; the batched request warms the
    larger-batch path that batch clients and the benchmark use.
    """
    from common import predict_protos
    requests = []
    for signature_name in signature_names:
        keyed = signature_name == signature.SIGNATURE_KEYED
        for i, jpeg in enumerate(jpeg_bytes_list):
            keys = [f"warmup-{i}"] if keyed else None
            requests.append(predict_protos.make_predict_request(
                [jpeg], model_name, signature_name, keys=keys))
        if len(jpeg_bytes_list) > 1:
            keys = [f"warmup-{i}" for i in range(len(jpeg_bytes_list))] if keyed else None
            requests.append(predict_protos.make_predict_request(
                jpeg_bytes_list, model_name, signature_name, keys=keys))
    return requests


def write_warmup_requests(export_dir, jpeg_bytes_list, model_name=signature.DEFAULT_MODEL_NAME,
                          signature_names=(signature.SIGNATURE_DEFAULT,)):
    """Writes the warmup file into one export version directory; returns its path.

    export_dir is OUT/export/<model_name>/<version>/ (it must already exist:
    the file goes beside saved_model.pb).
    """
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2
    if not tf.io.gfile.isdir(export_dir):
        raise WarmupError(f"export_dir={export_dir!r} is not a directory")
    jpegs = [bytes(jpeg) for jpeg in jpeg_bytes_list]
    if not jpegs:
        raise WarmupError("jpeg_bytes_list is empty: warmup needs at least one JPEG")
    requests = make_warmup_requests(jpegs, model_name, signature_names)
    if len(requests) > MAX_WARMUP_RECORDS:
        raise WarmupError(f"{len(requests)} warmup requests exceed TF Serving's limit of "
                         f"{MAX_WARMUP_RECORDS}; pass fewer JPEGs or signatures")
    path = os.path.join(export_dir, signature.WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.CopyFrom(request)
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(export_dir):
    """The PredictRequests in an export's warmup file ([] when it has none)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2
    path = os.path.join(export_dir, signature.WARMUP_FILE)
    if not tf.io.gfile.exists(path):
        return []
    requests = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        if log.WhichOneof("log_type") != "predict_log":
            raise ValueError(f"{path}: record {len(requests)} is a "
                             f"{log.WhichOneof('log_type')!r}, not a predict_log")
        requests.append(log.predict_log.request)
    return requests


def read_files(paths):
    """The bytes of each file; WarmupError naming the first that cannot be read."""
    contents = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                contents.append(f.read())
        except OSError as err:
            raise WarmupError(f"{path}: cannot read it ({err.strerror or err})") from None
    return contents


def main(argv=None):
    parser = console.ArgumentParser(prog="python -m common.warmup",
                                    description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", help="OUT/export/<model_name>/<version>/")
    parser.add_argument("jpegs", nargs="+", help="JPEG files to replay at load time")
    parser.add_argument("--model_name", default=signature.DEFAULT_MODEL_NAME)
    args = parser.parse_args(argv)
    jpegs = console.exit_on_user_error(read_files, args.jpegs)
    print(console.exit_on_user_error(write_warmup_requests, args.export_dir, jpegs,
                                     args.model_name))


if __name__ == "__main__":
    main()
