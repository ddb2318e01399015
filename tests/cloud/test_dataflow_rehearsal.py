"""--runner DataflowRunner rehearsed offline, for both pipelines.

The real commands (preprocess.jpeg_to_tfrecord.run, serving.batch_predict.run) run up to
the point of submission: their options, their gs:// reads against the suite's local GCS
emulator (tests/gcs_emulator.py), their pipeline. There Beam's DataflowRunner builds the
job with --dry_run and the Dataflow client stages it (setup.py's package, the pipeline
proto) to the test's own emulated bucket, with anonymous access (--no_auth) and without
submitting. The test then reads what the service would receive. Without credentials both
commands fail at once with one line naming the fix.

    .venv/bin/python -m pytest tests/cloud/test_dataflow_rehearsal.py
"""
import io
import os
import tarfile
import time

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import TestOptions as BeamTestOptions  # not a test class
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.internal import apiclient

from common import beam_pipeline, export_versions
from preprocess import jpeg_to_tfrecord, transforms
from serving import batch_predict
from tests.conftest import building_from_checkout
from tests.preprocess.test_gcs_emulator import bucket  # noqa: F401 (fixture)
from tests.user_commands import REPO_ROOT, error_lines, run, user_env

# The GCS emulator (a process of the session), the sdist build, the commands without credentials.
pytestmark = pytest.mark.process


def dataflow_flags(bucket_name, machine_type, max_workers):
    return ["--runner", "DataflowRunner", "--project", "demo-project", "--region", "us-central1",
            "--temp_location", f"gs://{bucket_name}/tmp", "--machine_type", machine_type,
            "--max_num_workers", str(max_workers), "--no_auth"]


class JobBuilt(Exception):
    """Carries the built, staged and unsubmitted Dataflow job out of the command."""


def build_and_stage(build, options):
    """Stands in for beam_pipeline.run_to_completion: the job Dataflow would get, not submitted."""
    options.view_as(BeamTestOptions).dry_run = True
    pipeline = beam.Pipeline(runner=beam_pipeline.make_runner(options), options=options)
    build(pipeline)
    job = pipeline.run().job
    apiclient.DataflowApplicationClient(options, job.root_staging_location).create_job_description(job)
    raise JobBuilt(job)


def rehearse(run, argv, monkeypatch):
    monkeypatch.setattr(beam_pipeline, "run_to_completion", build_and_stage)
    with building_from_checkout(), pytest.raises(JobBuilt) as built:  # stages setup.py's sdist
        run(argv)
    return built.value.args[0]


def staged_files(bucket, job):  # noqa: F811 (the fixture's name)
    prefix = job.options.view_as(beam.options.pipeline_options.GoogleCloudOptions).staging_location
    prefix = prefix[len(f"gs://{bucket.name}/"):]
    return {blob.name[len(prefix) + 1:]: blob for blob in bucket.list_blobs(prefix=prefix)}


def transform_names(job):
    return {t.unique_name for t in job.proto_pipeline.components.transforms.values()}


def check_workers_and_package(bucket, job, machine_type, max_workers):  # noqa: F811
    """The worker pool the service would start, and setup.py's package staged for it."""
    (pool,) = job.proto.environment.workerPools
    assert (pool.machineType, pool.autoscalingSettings.maxNumWorkers) == (machine_type, max_workers)
    staged = staged_files(bucket, job)
    assert {"workflow.tar.gz", "pipeline.pb"} <= set(staged)
    with tarfile.open(fileobj=io.BytesIO(staged["workflow.tar.gz"].download_as_bytes())) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"setup.py", "preprocess/transforms.py", "serving/batch_predict.py",
            "common/record_schema.py"} <= names
    environments = job.proto_pipeline.components.environments.values()
    staged_names = {beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(d.role_payload).staged_name
                    for env in environments for d in env.dependencies}
    assert "workflow.tar.gz" in staged_names  # what the workers pip-install


def image_fn_of(job):
    """The ProcessImageFn the workers unpickle."""
    for transform in job.proto_pipeline.components.transforms.values():
        if transform.spec.urn == "beam:transform:pardo:v1" and "ProcessImageFn" in transform.unique_name:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            return pickler.loads(payload.do_fn.payload)[0]
    raise AssertionError("no ProcessImageFn in the job")


def test_preprocessing_job_for_dataflow(bucket, monkeypatch):  # noqa: F811
    bucket.blob("in/train.csv").upload_from_string(f"gs://{bucket.name}/in/a.jpg,cat\n")
    bucket.blob("in/eval.csv").upload_from_string("b.jpg,dog\n")
    argv = ["--input_csv", f"train=gs://{bucket.name}/in/train.csv", "--input_csv",
            f"eval=gs://{bucket.name}/in/eval.csv", "--output_dir", f"gs://{bucket.name}/out"]
    job = rehearse(jpeg_to_tfrecord.run, argv + dataflow_flags(bucket.name, "n1-highcpu-8", 7),
                   monkeypatch)
    check_workers_and_package(bucket, job, "n1-highcpu-8", 7)
    assert {"ReadRows", "DeriveLabels", "ProcessImages", "WriteShards", "WriteDatasetFiles"} <= transform_names(job)
    fn = image_fn_of(job)
    assert isinstance(fn, transforms.ProcessImageFn) and fn._threads == 1  # --image_threads 1


def test_batch_prediction_job_for_dataflow(bucket, monkeypatch):  # noqa: F811
    bucket.blob("in/images.csv").upload_from_string(f"gs://{bucket.name}/in/a.jpg\n")
    model_dir = f"gs://{bucket.name}/run/export/image_classifier/2"
    output = f"gs://{bucket.name}/preds/p"
    # No export in the bucket: its version is given here as resolved.
    monkeypatch.setattr(export_versions, "resolve_export_dir", lambda path: (model_dir, 2))
    argv = ["--input_csv", f"gs://{bucket.name}/in/images.csv", "--model_dir", model_dir, "--output", output]
    job = rehearse(batch_predict.run, argv + dataflow_flags(bucket.name, "n1-standard-4", 3),
                   monkeypatch)
    # Nothing is published before the job has run: the shards are written into a staging folder.
    assert not [blob.name for blob in bucket.list_blobs(prefix="preds/p")]
    check_workers_and_package(bucket, job, "n1-standard-4", 3)
    names = transform_names(job)
    assert {"ReadUris", "Predict/LoadImages", "Predict/RunInference", "WriteJsonl"} <= names
    assert job.options.view_as(beam.options.pipeline_options.SetupOptions).setup_file == os.path.join(
        REPO_ROOT, "setup.py")


@pytest.mark.parametrize("command", [
    ["preprocess.jpeg_to_tfrecord", "--input_csv", "train=gs://b/train.csv", "--output_dir", "gs://b/out"],
    ["serving.batch_predict", "--input_csv", "gs://b/images.csv", "--model_dir", "gs://b/m/1",
     "--output", "gs://b/preds/p"],
])
def test_without_credentials_both_commands_fail_at_once_naming_the_fix(command, tmp_path):
    # No gcloud login in HOME, and a metadata server that refuses at once (not a GCE VM).
    env = user_env(drop=("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"), HOME=tmp_path,
                   CLOUDSDK_CONFIG=tmp_path / "gcloud", GCE_METADATA_HOST="127.0.0.1:9",
                   GCE_METADATA_IP="127.0.0.1:9")
    flags = ["--runner", "DataflowRunner", "--project", "p", "--region", "us-central1",
             "--temp_location", "gs://b/tmp"]
    start = time.monotonic()
    result = run(*command, *flags, env=env, timeout=120)
    assert (result.returncode, time.monotonic() - start < 60) == (2, True), result.stderr[-2000:]
    lines = error_lines(result)
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("error: --runner DataflowRunner needs Google Cloud credentials")
    assert "gcloud auth application-default login" in lines[0]
