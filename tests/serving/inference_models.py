"""A tiny SavedModel with TF Serving's classification and regression signatures.

Built as TF Serving's own test models are (half_plus_two): a tf.compat.v1 graph that
parses serialized tf.Examples, saved with SavedModelBuilder and the
`classification_signature_def` / `regression_signature_def` helpers, so its
SignatureDefs carry method_name tensorflow/serving/classify and .../regress and take
one string input, `inputs`. Features: "x" (2 floats), "bias" (1 float, default 0).
Signature "scale" is a predict signature on a float input x [n, 2]: x / 3 as float32
and float64, for the JSON number rules.

    .venv/bin/python -c "from tests.serving.inference_models import save_examples_model as s; print(s('/tmp/m/1'))"
"""
import numpy as np

LABELS = (b"low", b"mid", b"high")
WEIGHTS = np.array([[1.0, -1.0, 0.5], [0.5, 2.0, -1.0]], np.float32)  # [x, class]
SIGNATURES = ("serving_default", "classify_both", "classify_scores", "classify_classes",
              "regress", "regress_column", "predict_x", "scale")


def build_outputs(tf, serialized):
    """{name: tensor}: scores [n, 3] float32, classes [n, 3] string, value [n], x [n, 2]."""
    features = tf.io.parse_example(serialized, {
        "x": tf.io.FixedLenFeature([2], tf.float32),
        "bias": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0])})
    x, bias = features["x"], features["bias"]
    weights = tf.compat.v1.get_variable("weights", initializer=tf.constant(WEIGHTS))
    scores = tf.nn.softmax(tf.matmul(x, weights) + bias)
    classes = tf.tile(tf.constant([list(LABELS)]), [tf.shape(x)[0], 1])
    value = tf.reduce_sum(x, axis=1) * 0.5 + bias[:, 0]  # [n]
    x_in = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x_in")  # for JSON values
    return {"scores": scores, "classes": classes, "value": value, "x": x, "x_in": x_in,
            "third": x_in / 3, "third64": tf.cast(x_in, tf.float64) / 3}


def make_signature_defs(tf, serialized, out):
    sigs = tf.compat.v1.saved_model
    classify_both = sigs.classification_signature_def(serialized, out["classes"], out["scores"])
    return {
        "serving_default": classify_both, "classify_both": classify_both,
        "classify_scores": sigs.classification_signature_def(serialized, None, out["scores"]),
        "classify_classes": sigs.classification_signature_def(serialized, out["classes"], None),
        "regress": sigs.regression_signature_def(serialized, out["value"]),
        "regress_column": sigs.regression_signature_def(serialized, out["value"][:, None]),
        "predict_x": sigs.predict_signature_def({"examples": serialized}, {"x": out["x"]}),
        "scale": sigs.predict_signature_def({"x": out["x_in"]}, {"third": out["third"],
                                                                  "third64": out["third64"]}),
    }


def save_examples_model(export_dir):
    """Writes the model to export_dir (a version directory); returns export_dir."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        serialized = tf.compat.v1.placeholder(tf.string, [None], name="tf_example")
        out = build_outputs(tf, serialized)
        builder = tf.compat.v1.saved_model.Builder(str(export_dir))
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            builder.add_meta_graph_and_variables(
                session, ["serve"], signature_def_map=make_signature_defs(tf, serialized, out))
        builder.save()
    return export_dir


def make_example(x, bias=None):
    """A serialized tf.Example with feature x (2 floats) and optionally bias (1 float)."""
    import tensorflow as tf
    feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=x))}
    if bias is not None:
        feature["bias"] = tf.train.Feature(float_list=tf.train.FloatList(value=[bias]))
    return tf.train.Example(features=tf.train.Features(feature=feature))
