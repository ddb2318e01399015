"""The serving contract: the names every exported SavedModel, server and client share.

Exports live at ``OUT/export/<model_name>/<version>/`` (TF Serving's layout;
the version is an integer directory name, the highest one is served).

    python -c "import common.signature as s; print(s.SIGNATURES)"
"""
# Inputs. TF Serving REST clients send image bytes as {"b64": "..."}: the
# "_bytes" suffix is what tells TF Serving to base64-decode them.
INPUT_IMAGE_BYTES = "image_bytes"   # tf.string [batch]: JPEG file bytes
INPUT_KEY = "key"                   # tf.string [batch]: opaque id, returned unchanged

# Outputs.
OUTPUT_PROBABILITIES = "probabilities"  # float32 [batch, num_classes], rows sum to 1
OUTPUT_CLASS_IDS = "class_ids"          # int64 [batch]: argmax, 0-based into labels.txt
OUTPUT_CLASSES = "classes"              # tf.string [batch]: labels[class_ids]
OUTPUT_KEY = "key"                      # tf.string [batch]: only in the keyed signature

# Signatures. TF Serving requires every input of a signature in each request,
# so the key is optional by having its own signature rather than a default.
SIGNATURE_DEFAULT = "serving_default"  # image_bytes -> probabilities, class_ids, classes
SIGNATURE_PREDICT = "predict"          # the same as serving_default, by a stable name
SIGNATURE_KEYED = "predict_keyed"      # image_bytes, key -> the same outputs plus key
SIGNATURES = (SIGNATURE_DEFAULT, SIGNATURE_PREDICT, SIGNATURE_KEYED)

# The class names travel inside the export as a graph constant of this name, so
# an export is usable without its labels.txt (common/export_predictor.py reads it).
LABELS_CONSTANT = "label_names"

EXPORT_SUBDIR = "export"      # OUT/export/<model_name>/<version>/
BEST_EXPORT_SUBDIR = "best_export"  # OUT/best_export/<model_name>/<version>/ (highest eval accuracy)
DEFAULT_MODEL_NAME = "image_classifier"
WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"

# How many of the most likely classes a prediction lists (batch prediction's top_k and
# the trainer's eval top-k accuracy default; TF Serving clients ask for their own).
DEFAULT_TOP_K = 5
# Batch prediction's output formats (trainer --mode predict and serving.batch_predict):
# sharded JSON lines for pipelines, one CSV for people (common/prediction_records.py).
PREDICTION_FORMATS = ("jsonl", "csv")
