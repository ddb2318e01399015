"""What the report page shows, read from a run directory: curves, the export, its eval predictions.

The curves come from OUT/eval_results.jsonl (trainer/run/eval_records.py) and from the
training scalars in OUT's own TensorBoard event files, as do the newest training images
(trainer/run/input_images.py: what the augmentation made of them); the confusion matrix
and the misclassified images come from running the best export's serving
signature (common/export_predictor.py) on the eval TFRecords, so the page shows
what a served model does, not what a checkpoint did.

    .venv/bin/python -m trainer.report.data OUT     # print what the report would read
"""
import dataclasses
import heapq
import itertools
import os
import sys

import numpy as np
import tensorflow as tf

from common import chunks, export_predictor, export_versions, record_schema, signature
from trainer.data import input as input_lib
from trainer.report import ReportError, check_run_directory
from trainer.settings import table
from trainer.run import eval_records, input_images
from trainer.run import params_file

PREDICT_BATCH = 256  # images per call of the serving signature: bounded memory, few calls
IMAGE_STEPS = 2  # the newest summary steps whose input images the page shows (3 images each)
TRAINING_IMAGE_SETTINGS = ("min_crop_area", "random_flip") + input_lib.AUGMENT_SETTINGS


@dataclasses.dataclass(frozen=True)
class Mistake:
    uri: str
    jpeg: bytes
    true_id: int
    predicted_id: int
    probability: float       # of the predicted class
    true_probability: float  # of the true class


@dataclasses.dataclass
class Evaluation:
    true_ids: list     # per eval image, in record order
    predicted_ids: list
    mistakes: list     # the most confident mistakes first, at most max_mistakes
    num_mistakes: int  # all of them


def read_run_params(output_dir):
    """OUT/params.json; ReportError when OUT is not a trainer run directory (gs:// too)."""
    check_run_directory(output_dir, tf.io.gfile.exists)
    return params_file.read_saved_params(output_dir)


def serving_model_name(params):
    return params.get("serving_model_name") or signature.DEFAULT_MODEL_NAME


def find_export(output_dir, model_name):
    """(export dir, step, "best" or "latest"): OUT/best_export first, else OUT/export."""
    for subdir, kind in ((signature.BEST_EXPORT_SUBDIR, "best"), (signature.EXPORT_SUBDIR, "latest")):
        base = os.path.join(output_dir, subdir, model_name)
        version = export_versions.latest_version(base)
        if version is not None:
            return export_versions.version_dir(base, version), version, kind
    raise ReportError(f"{output_dir} has no export yet (nothing under {signature.BEST_EXPORT_SUBDIR}/"
                      f"{model_name} or {signature.EXPORT_SUBDIR}/{model_name}); "
                      "let trainer.task finish an evaluation or run it with --mode export")


def scalar_value(value):
    """The float of a summary value: a TF1 simple_value or a TF2 scalar tensor; None otherwise."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
        return float(tf.make_ndarray(value.tensor))
    return None


@dataclasses.dataclass
class TrainingEvents:
    scalars: dict  # {tag: [(step, value)]}
    images: dict   # {step: [PNG bytes]}: the newest steps' input images (trainer/run/input_images.py)


def read_training_events(output_dir, image_steps=IMAGE_STEPS):
    """The training scalars and the input images of the newest image_steps summary steps, from
    the event files directly in OUT (training, not eval/), in one pass.

    Values are applied in the order they were written (wall time), so after a
    resumed run retrains a step, its later value wins.
    """
    scalars, images = [], {}
    for path in tf.io.gfile.glob(os.path.join(output_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                number, index = scalar_value(value), input_images.shown_index(value.tag)
                if number is not None:
                    scalars.append((event.wall_time, value.tag, int(event.step), number))
                elif index is not None and value.HasField("image"):
                    keep_newest_image(images, image_steps, int(event.step), index,
                                      (event.wall_time, value.image.encoded_image_string))
    by_tag = {}
    for _, tag, step, number in sorted(scalars, key=lambda e: e[0]):
        if np.isfinite(number):
            by_tag.setdefault(tag, {})[step] = number
    return TrainingEvents({tag: sorted(by_step.items()) for tag, by_step in by_tag.items()},
                          {step: [shown[i][1] for i in sorted(shown)] for step, shown in sorted(images.items())})


def keep_newest_image(images, steps, step, index, timed_png):
    """Keeps in images ({step: {index: (wall time, PNG)}}) the steps newest steps' images, the
    later written of two at one place: a few images in memory, however long the run."""
    if step not in images and len(images) >= steps and step < min(images, default=step):
        return
    shown = images.setdefault(step, {})
    if index not in shown or shown[index][0] <= timed_png[0]:
        shown[index] = timed_png
    if len(images) > steps:
        del images[min(images)]


def augmentation_in_effect(params):
    """'mixup_alpha=0.2, random_erasing=0.25' of the run's settings that shape its training
    images (trainer/data/input.py's) away from their defaults; "" when all are at them."""
    changed = [f"{key}={params[key]}" for key in TRAINING_IMAGE_SETTINGS
               if key in params and params[key] != table.DEFAULTS[key]]
    return ", ".join(changed)


def eval_files(file_pattern):
    """The files of the eval glob; ReportError when there are none."""
    if not file_pattern:
        raise ReportError("no eval data: the run's params.json has no eval_data_path; "
                          "pass --eval_data_path 'DIR/eval-*'")
    paths = sorted(tf.io.gfile.glob(file_pattern))
    if not paths:
        raise ReportError(f"no eval data: {file_pattern!r} matches no files; "
                          "pass --eval_data_path 'DIR/eval-*' (quoted)")
    return paths


def read_eval_records(paths):
    """Yields (uri, jpeg bytes, 0-based label) per record of the eval TFRecords."""
    for path in paths:
        for number, record in enumerate(tf.compat.v1.io.tf_record_iterator(path)):
            example = record_schema.decode_example_proto(record)
            uri = example.get(record_schema.FILENAME, b"").decode() or f"{path}:{number}"
            yield uri, example[record_schema.ENCODED], int(example[record_schema.LABEL])


def evaluate_export(export, records, max_mistakes):
    """Evaluation of a LoadedExport on (uri, jpeg, label) records, a batch at a time."""
    true_ids, predicted_ids, kept, order = [], [], [], itertools.count()
    for batch in chunks.split_into_chunks(records, PREDICT_BATCH):
        check_labels([label for _, _, label in batch], len(export.labels), batch[0][0])
        probabilities = export_predictor.predict_probabilities(export, [jpeg for _, jpeg, _ in batch])
        for (uri, jpeg, label), row in zip(batch, probabilities):
            predicted = int(np.argmax(row))
            true_ids.append(label)
            predicted_ids.append(predicted)
            if predicted != label:
                keep_most_confident(kept, max_mistakes, next(order), Mistake(
                    uri, jpeg, label, predicted, float(row[predicted]), float(row[label])))
    num_mistakes = sum(t != p for t, p in zip(true_ids, predicted_ids))
    return Evaluation(true_ids, predicted_ids, most_confident_first(kept), num_mistakes)


def keep_most_confident(heap, size, order, mistake):
    """Keeps the size most confident mistakes in a min-heap of (probability, order, mistake)."""
    if len(heap) < size:
        heapq.heappush(heap, (mistake.probability, order, mistake))
    elif size:
        heapq.heappushpop(heap, (mistake.probability, order, mistake))


def most_confident_first(heap):
    """The mistakes of keep_most_confident's heap, highest probability first, ties in input order."""
    return [mistake for _, _, mistake in sorted(heap, key=lambda item: (-item[0], item[1]))]


def check_labels(labels, num_classes, uri):
    bad = [label for label in labels if not 0 <= label < num_classes]
    if bad:
        raise ReportError(f"eval record label {bad[0]} (near {uri}) is not one of the export's "
                          f"{num_classes} classes: is the eval data from this run's dataset?")


def main(argv):
    output_dir = argv[1]
    params = read_run_params(output_dir)
    print("export:", find_export(output_dir, serving_model_name(params)))
    print("eval records:", [r.get("global_step") for r in eval_records.read_eval_results(output_dir)])
    events = read_training_events(output_dir)
    print("training scalars:", {tag: len(v) for tag, v in events.scalars.items()})
    print("training images:", {step: len(shown) for step, shown in events.images.items()})
    print("eval files:", eval_files(params.get("eval_data_path")))


if __name__ == "__main__":
    main(sys.argv)
