"""Classify, Regress and MultiInference on a served version, as TF Serving runs them.

A classification or regression signature takes `inputs`, serialized tf.Examples (a
context's bytes before each example's, InputToSerializedExampleTensor); `classes` and/or
`scores` become a ClassificationResult, `outputs` a RegressionResult. Checks and words
are TF Serving's (servables/tensorflow/classifier.cc, regressor.cc, multi_inference.cc).

    .venv/bin/python -m pytest tests/serving/test_tf_serving_conformance.py -k "classify or regress"
"""
import numpy as np
from tensorflow_serving.apis import (classification_pb2, inference_pb2, regression_pb2)

from common import signature

from serving.standin import errors, metrics

CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"
INPUTS, CLASSES, SCORES, OUTPUTS = "inputs", "classes", "scores", "outputs"
KINDS = {CLASSIFY: "classification", REGRESS: "regression"}


def no_signature(name):
    """GetClassification/RegressionSignatureDef's words for a name the model lacks."""
    return errors.InvalidArgument(f"No signature was found with the name: {name}")


def check_signature(signature_def, method):
    """The method, then PreProcessClassification / PreProcessRegression: one `inputs`, the
    expected outputs."""
    kind = KINDS[method]
    if signature_def.method_name != method:
        raise errors.InvalidArgument(f"Expected {kind} signature method_name to be "
                                     f"{method}. Was: {signature_def.method_name}")
    if len(signature_def.inputs) != 1:
        raise errors.InvalidArgument("Expected one input Tensor.")
    if method == CLASSIFY and len(signature_def.outputs) not in (1, 2):
        raise errors.InvalidArgument(
            f"Expected one or two output Tensors, found {len(signature_def.outputs)}")
    if method == REGRESS and len(signature_def.outputs) != 1:
        raise errors.InvalidArgument("Expected one output Tensor.")
    if INPUTS not in signature_def.inputs:
        raise errors.FailedPrecondition(f"No {kind} inputs found in SignatureDef: {signature_def}")
    if method == REGRESS and OUTPUTS not in signature_def.outputs:
        raise errors.FailedPrecondition(f"No regression outputs found in SignatureDef: "
                                        f"{signature_def}")
    if method == CLASSIFY and not {CLASSES, SCORES} & set(signature_def.outputs):
        raise errors.FailedPrecondition(
            f'Expected classification signature outputs to contain at least one of "{CLASSES}" '
            f'or "{SCORES}". Signature was: {signature_def}')


def serialize_input(input_proto):
    """InputToSerializedExampleTensor: [n] object array of serialized tf.Examples."""
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        serialized = [e.SerializeToString() for e in input_proto.example_list.examples]
    elif kind == "example_list_with_context":
        merged = input_proto.example_list_with_context
        context = merged.context.SerializeToString()
        serialized = [context + e.SerializeToString() for e in merged.examples]
    else:
        serialized = []
    if not serialized:
        raise errors.InvalidArgument("Input is empty.")
    array = np.empty(len(serialized), dtype=object)
    array[:] = serialized
    return array


def run_examples(served, name, input_proto, api):
    """Runs signature `name` on the request's examples: ({output: array}, example count)."""
    examples = serialize_input(input_proto)
    metrics.PROCESS.record_examples(served.model_name, len(examples))
    return served.predict(name, {INPUTS: examples}, api=api), len(examples)


def check_output(array, alias, num_examples, dtype_word):
    """PostProcessClassificationResult's checks of `classes` or `scores`."""
    if array.ndim != 2:
        raise errors.InvalidArgument(f"Expected Tensor shape: [batch_size num_classes] but got "
                                     f"{list(array.shape)}")
    is_string = array.dtype == object
    if is_string != (dtype_word == "DT_STRING") or (not is_string and array.dtype != np.float32):
        raise errors.InvalidArgument(f"Expected {alias} Tensor of {dtype_word}. Got: {array.dtype}")
    if array.shape[0] != num_examples:
        raise errors.InvalidArgument(f"Expected {alias} output batch size of {num_examples}. "
                                     f"Got: {array.shape[0]}")


def classification_result(outputs, num_examples, result):
    """Fills a ClassificationResult from `classes` and/or `scores` [batch, num_classes]."""
    classes, scores = outputs.get(CLASSES), outputs.get(SCORES)
    if classes is not None:
        check_output(classes, CLASSES, num_examples, "DT_STRING")
    if scores is not None:
        check_output(scores, SCORES, num_examples, "DT_FLOAT")
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise errors.InvalidArgument(f"Tensors class and score should match in dim_size(1). "
                                     f"Got {classes.shape[1]} vs. {scores.shape[1]}")
    num_classes = (classes if classes is not None else scores).shape[1]
    for i in range(num_examples):
        item = result.classifications.add()
        for j in range(num_classes):
            entry = item.classes.add()
            if classes is not None:
                entry.label = classes[i, j].decode("utf-8", "replace")
            if scores is not None:
                entry.score = scores[i, j]
    return result


def regression_result(outputs, num_examples, result):
    """Fills a RegressionResult from `outputs` ([batch] or [batch, 1] float32)."""
    values = outputs[OUTPUTS]
    if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
        raise errors.InvalidArgument(f"Expected output Tensor shape to be either [batch_size] or "
                                     f"[batch_size, 1] but got {list(values.shape)}")
    if values.shape[0] != num_examples:
        raise errors.InvalidArgument(f"Input batch size did not match output batch size: "
                                     f"{num_examples} vs. {values.shape[0]}")
    if values.dtype != np.float32:
        raise errors.InvalidArgument(f"Expected output Tensor of DT_FLOAT.  Got: {values.dtype}")
    for value in values.ravel().tolist():
        result.regressions.add(value=value)
    return result


# method -> (the API label of its model call, the function filling its result, the
# InferenceResult field MultiInference fills)
RESULTS = {CLASSIFY: ("Classify", classification_result, "classification_result"),
           REGRESS: ("Regress", regression_result, "regression_result")}


def set_model_spec(spec, served, signature_name):
    """MakeModelSpec: the name, the version served and the signature ("" -> serving_default)."""
    spec.name = served.model_name
    spec.version.value = served.version
    spec.signature_name = signature_name or signature.SIGNATURE_DEFAULT


def classify(served, request):
    """ClassificationResponse for a ClassificationRequest (TF Serving's Classify)."""
    return run_request(served, request, CLASSIFY, classification_pb2.ClassificationResponse())


def regress(served, request):
    """RegressionResponse for a RegressionRequest (TF Serving's Regress)."""
    return run_request(served, request, REGRESS, regression_pb2.RegressionResponse())


def run_request(served, request, method, response):
    """Classify or Regress: the signature found and checked for method, the request's examples
    run through it, response.result filled by the method's RESULTS function."""
    signature_name = request.model_spec.signature_name
    name, signature_def = served.resolve_signature(signature_name, no_signature)
    check_signature(signature_def, method)
    api, fill_result, _ = RESULTS[method]
    outputs, count = run_examples(served, name, request.input, api)
    fill_result(outputs, count, response.result)
    set_model_spec(response.model_spec, served, signature_name)
    return response


def check_tasks(served, request):
    """TensorFlowMultiInferenceRunner::Infer's checks: [(task, signature name)]."""
    checked, model_name = [], ""
    for task in request.tasks:
        if not task.model_spec.name:
            raise errors.InvalidArgument("Found ModelSpec with an empty model name.")
        if model_name and task.model_spec.name != model_name:
            raise errors.InvalidArgument(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name.")
        model_name = task.model_spec.name
        name = task.model_spec.signature_name or signature.SIGNATURE_DEFAULT
        if name in [n for _, n in checked]:
            raise errors.InvalidArgument(f"Duplicate evaluation of signature: {name}")
        _, signature_def = served.resolve_signature(name, lambda name: errors.InvalidArgument(
            f"Requested signature not found in model graph: {name}"))
        if task.method_name not in KINDS:
            raise errors.Unimplemented(f"Unsupported signature method_name: {task.method_name}")
        check_signature(signature_def, task.method_name)
        checked.append((task, name))
    return checked


def multi_inference(served, request):
    """MultiInferenceResponse: one classification or regression result per task."""
    tasks = check_tasks(served, request)
    examples = serialize_input(request.input)
    metrics.PROCESS.record_examples(served.model_name, len(examples))
    response = inference_pb2.MultiInferenceResponse()
    for task, name in tasks:
        api, fill_result, field = RESULTS[task.method_name]
        result = response.results.add()
        outputs = served.predict(name, {INPUTS: examples}, api=api)
        fill_result(outputs, len(examples), getattr(result, field))
        set_model_spec(result.model_spec, served, task.model_spec.signature_name)
    return response
