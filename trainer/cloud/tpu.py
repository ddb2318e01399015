"""The TPU both engines run on: its cluster resolver, looked up before anything is written.

--tpu names a Cloud TPU (its address is looked up with the Cloud TPU API, which needs
credentials), a grpc:// address, or 'local' on a TPU VM (the chips are this host's:
no API call). --tpu_zone and --gcp_project are detected on GCE when unset. The
Estimator engine passes the resolver to its RunConfig; the Keras engine connects to
it and builds a TPUStrategy (trainer/keras/strategy.py).

    .venv/bin/python -m trainer.task --use_tpu --tpu local ...      # on a TPU VM
"""
import tensorflow as tf

from trainer.settings import checks


def resolve_tpu(params):
    """The TPU's cluster resolver, its address looked up now: without Google Cloud
    credentials (or with a TPU name the API does not know) the run stops here in one
    line naming the fix, not deep inside the first training call."""
    cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=params["tpu"], zone=params["tpu_zone"], project=params["gcp_project"])
    try:
        cluster.master()
    except Exception as err:  # oauth2client's, google.auth's or googleapiclient's error types
        name = type(err).__name__
        if "Credentials" in name:
            raise checks.ConfigError(
                f"use_tpu: no Google Cloud credentials to look up --tpu={params['tpu']!r}: run "
                f"`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), "
                f"or run on a Cloud TPU VM") from None
        if name == "HttpError":
            raise checks.ConfigError(
                f"use_tpu: the Cloud TPU API could not find --tpu={params['tpu']!r} in zone "
                f"{params['tpu_zone']!r}, project {params['gcp_project']!r}: {err}") from None
        raise
    return cluster
