"""The TFLite models checked against their export on eval records: top-1 agreement, max |diff|, accuracy.

The eval records are split in two, disjoint (EvalSplit): a few, spread evenly over them,
calibrate the int8 model; the check scores only the others, images no model was calibrated on.
Each batch of eval JPEGs goes through the export's serving signature (common/export_predictor.py)
and, preprocessed by the same eval image path (common/image_ops.py), through each TFLite model
in TensorFlow's own interpreter (tf.lite.Interpreter; TensorFlow 2.20 marks it deprecated in
favour of LiteRT, ai-edge-litert, and it still runs there). An int8 model's input is the float
image quantized with the model's own scale and zero point, and its output dequantized.

    .venv/bin/python -m trainer.export_tflite --output_dir OUT   # converts, then runs this check
"""
import dataclasses
import warnings

import numpy as np
import tensorflow as tf

from common import chunks, export_predictor, image_ops, record_schema

FLOAT32_AGREEMENT_GOAL = 0.995  # a float32 model is the export's own numbers: anything less is a bug
CHECK_BATCH = 64  # eval images per call of each model: bounded memory


@dataclasses.dataclass(frozen=True)
class EvalSplit:
    """The eval records in two disjoint parts: `calibrating` of the `total`, spread evenly over
    them (record i when floor((i+1)c/n) > floor(ic/n): about every n/c-th, so no run of one
    class is left out of either part), calibrate the int8 model; the check scores the others."""
    calibrating: int
    total: int

    def calibrates(self, index):
        return (index + 1) * self.calibrating // self.total > index * self.calibrating // self.total

    def is_checked(self, index):
        return not self.calibrates(index)

    def describe(self):
        """What tflite_metadata.json and tflite_check.json say of it."""
        return {"images": self.calibrating, "of_eval_images": self.total,
                "which": "spread evenly over the eval records in file order (record i when "
                         "floor((i+1)*images/of_eval_images) > floor(i*images/of_eval_images)); "
                         "the check scores the others"}


@dataclasses.dataclass
class ModelScore:
    name: str
    agreeing: int = 0  # top-1 class the same as the export's
    correct: int = 0   # top-1 class the record's label
    max_abs_diff: float = 0.0  # of any class's probability from the export's

    def add(self, probabilities, expected, labels):
        """One batch: probabilities [n, C] of this model, expected [n, C] of the export's."""
        predicted = probabilities.argmax(axis=1)
        self.agreeing += int((predicted == expected.argmax(axis=1)).sum())
        self.correct += int((predicted == labels).sum())
        self.max_abs_diff = max(self.max_abs_diff, float(np.abs(probabilities - expected).max()))

    def as_dict(self, count):
        return {"top1_agreement": self.agreeing / count if count else None,
                "max_abs_diff": self.max_abs_diff if count else None,
                "accuracy": self.correct / count if count else None,
                "agreeing": self.agreeing, "correct": self.correct}


def read_eval_examples(paths, keep=None):
    """Yields (jpeg bytes, 0-based label) of the eval TFRecords' records, in file order; only of
    the records whose index keep(index) is true when keep is given."""
    index = 0
    for path in paths:
        for record in tf.compat.v1.io.tf_record_iterator(path):
            if keep is None or keep(index):
                example = record_schema.decode_example_proto(record)
                yield example[record_schema.ENCODED], int(example[record_schema.LABEL])
            index += 1


def count_eval_examples(paths):
    return sum(1 for path in paths for _ in tf.compat.v1.io.tf_record_iterator(path))


def preprocess(jpegs, image_size):
    """float32 [n, S, S, 3]: the eval (= serving) image path of n JPEGs."""
    return image_ops.preprocess_batch_for_eval(tf.constant(list(jpegs), tf.string), image_size).numpy()


def make_interpreter(model_content):
    with warnings.catch_warnings():  # TensorFlow 2.20's notice that LiteRT replaces it
        warnings.simplefilter("ignore", UserWarning)
        return tf.lite.Interpreter(model_content=model_content)


def quantize(images, quantization, dtype):
    """images in the model's integer input: round(x / scale) + zero_point, clipped to dtype."""
    scale, zero_point = quantization
    info = np.iinfo(dtype)
    return np.clip(np.round(images / scale) + zero_point, info.min, info.max).astype(dtype)


def run_interpreter(interpreter, images):
    """float32 [n, C] probabilities of a TFLite model on float32 images [n, S, S, 3]."""
    source, target = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.resize_tensor_input(source["index"], images.shape)
    interpreter.allocate_tensors()
    if source["dtype"] != np.float32:
        images = quantize(images, source["quantization"], source["dtype"])
    interpreter.set_tensor(source["index"], images)
    interpreter.invoke()
    output = interpreter.get_tensor(target["index"])
    if target["dtype"] != np.float32:
        scale, zero_point = target["quantization"]
        output = (output.astype(np.float32) - zero_point) * scale
    return output


def check_models(export_dir, models, eval_paths, image_size, split):
    """{"images": n checked, "calibration": split.describe(), "savedmodel_accuracy": a,
    <model name>: ModelScore.as_dict} for models = {name: flatbuffer bytes}, on the eval records
    split did not calibrate on."""
    export = export_predictor.load_export(export_dir)
    interpreters = {name: make_interpreter(content) for name, content in models.items()}
    scores = {name: ModelScore(name) for name in models}
    count = export_correct = 0
    for batch in chunks.split_into_chunks(read_eval_examples(eval_paths, split.is_checked), CHECK_BATCH):
        jpegs, labels = [jpeg for jpeg, _ in batch], np.array([label for _, label in batch])
        expected = export_predictor.predict_probabilities(export, jpegs)  # float32 [n, C]
        images = preprocess(jpegs, image_size)
        for name, interpreter in interpreters.items():
            scores[name].add(run_interpreter(interpreter, images), expected, labels)
        count += len(batch)
        export_correct += int((expected.argmax(axis=1) == labels).sum())
    result = {"images": count, "calibration": split.describe(),
              "savedmodel_accuracy": export_correct / count if count else None}
    result.update({name: score.as_dict(count) for name, score in scores.items()})
    return result


def shortfall(check, model_name):
    """The one line saying model_name agrees with the export on fewer eval images than the
    float32 goal, or None when it meets it."""
    agreement = check[model_name]["top1_agreement"]
    if agreement is None or agreement >= FLOAT32_AGREEMENT_GOAL:
        return None
    return (f"{model_name} agrees with the export on {agreement:.2%} of the eval images, below the "
            f"goal {FLOAT32_AGREEMENT_GOAL:.1%}: a conversion bug; the files are written, to look at")
