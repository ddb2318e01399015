# The trainer's container for Vertex AI custom jobs on Cloud TPU (TPUEstimator engine,
# TensorFlow 2.15): cloud/vertex_tpu_job.yaml and cloud/vertex_hptuning_job.yaml run it.
# No prebuilt TensorFlow TPU training image can be pulled any more: the only one,
# tf-tpu.2-15.cp310, reached its end of availability on 2025-10-23 (Google's "Supported
# frameworks" page, https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/supported-frameworks,
# read 2026-11-24), so the route is this image, in your project's Artifact Registry:
#
#   gcloud artifacts repositories create tpu-image-classifier --repository-format=docker \
#       --location=us-central1
#   gcloud auth configure-docker us-central1-docker.pkg.dev
#   docker build -t us-central1-docker.pkg.dev/YOUR_PROJECT/tpu-image-classifier/trainer:tf2.15 \
#       --build-arg TF_TPU_WHEEL_SHA256=... --build-arg LIBTPU_SHA256=... .
#   docker push us-central1-docker.pkg.dev/YOUR_PROJECT/tpu-image-classifier/trainer:tf2.15
#
# YOUR_PROJECT: the Google Cloud project that owns the registry and runs the job. The two
# sha256 build args are the hashes of the TPU runtime files below (see there). The job's
# arguments follow the entry point (trainer.task flags). tests/cloud/test_container_image.py
# checks this file against CI's lock install, the entry point and the job configs.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Every package of requirements.lock (TensorFlow 2.15.1 among them), with hashes and no
# resolution: the install tools/install_venv.sh makes for .venv and CI (Python 3.11, the
# lock's --python-version).
COPY requirements.lock ./
RUN pip install --no-cache-dir --no-deps --require-hashes -r requirements.lock

# The TPU runtime, in its own pinned lines. Google's "Training with TPU accelerators" page
# (https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/training-with-tpu-vm,
# read 2026-11-24): a custom container on a TPU VM needs the TensorFlow build made for TPU
# VMs and its matching libtpu saved as /lib/libtpu.so (its TF 2.15 example: the wheel
# tf-2.15.0/tensorflow-2.15.0-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl and
# libtpu/1.9.0/libtpu.so from storage.googleapis.com/cloud-tpu-tpuvm-artifacts). libtpu 1.9.0
# is the one for TensorFlow 2.15.0 and 2.15.1 (https://cloud.google.com/tpu/docs/runtimes,
# read 2026-11-24). No package index carries them for 2.15: PyPI's tensorflow-tpu starts at
# 2.16.1 and PyPI's libtpu is numbered 0.0.x (pip index versions, 2026-11-24).
# NOT CONFIRMED: that the cp311 build of the 2.15.1 wheel sits at TF_TPU_WHEEL_URL (Google's
# page shows the cp310 2.15.0 file only; this image is Python 3.11 because the lock is).
# Look first:  gsutil ls gs://cloud-tpu-tpuvm-artifacts/tensorflow/tf-2.15.1/
# Then pin the sha256 of the file you use (sha256sum FILE) with --build-arg; the build
# stops at cloud/fetch_pinned.py, naming the URL, until both hashes are given.
# PJRT (TPU v5e) is switched on by the job's environment, not here: cloud/vertex_tpu_job.yaml
# runs v3 with the stream-executor runtime that TPUEstimator's session path expects.
ARG TF_TPU_WHEEL_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-2.15.1/tensorflow-2.15.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
ARG TF_TPU_WHEEL_SHA256=FILL_IN
ARG LIBTPU_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/1.9.0/libtpu.so
ARG LIBTPU_SHA256=FILL_IN
COPY cloud/fetch_pinned.py /tmp/fetch_pinned.py
RUN python /tmp/fetch_pinned.py "$TF_TPU_WHEEL_URL" "$TF_TPU_WHEEL_SHA256" /tmp/wheels/ \
    && pip install --no-cache-dir --no-deps --force-reinstall /tmp/wheels/tensorflow-*.whl \
    && python /tmp/fetch_pinned.py "$LIBTPU_URL" "$LIBTPU_SHA256" /lib/libtpu.so \
    && rm -rf /tmp/wheels /tmp/fetch_pinned.py

COPY setup.py ./
COPY common ./common
COPY trainer ./trainer
COPY preprocess ./preprocess
COPY serving ./serving
RUN pip install --no-cache-dir --no-deps --no-build-isolation .

ENTRYPOINT ["python", "-m", "trainer.task"]
