"""The TPU both engines run on: found (or refused in one line) before anything is written.

--tpu names a Cloud TPU (its address is looked up with the Cloud TPU API, which needs
credentials), a grpc:// address, or 'local' on a TPU VM (the chips are this host's:
no API call). Unset, the resolver's environment (TPU_NAME, as Cloud TPU jobs and GKE
set it) names it, and on a TPU VM without one it is 'local'. --tpu_zone and
--gcp_project are read from the GCE metadata server when unset.

Which TPU is named (tpu_name: --tpu, the environment, or this TPU VM's device files), and
whether 'local' has chips here (check_local_chips), is decided in trainer/settings/early_check.py
without TensorFlow, so that trainer.task refuses --use_tpu with none to name, or --tpu local
without chips, before TensorFlow loads; the run asks the same functions here.
check_tpu checks each of these before resolve_tpu builds the resolver, quickly and
without network where none is needed: 'local' needs this host's TPU chips (/dev/accel* on
v2-v4 TPU VMs, /dev/vfio/<n> on v5 and later), a grpc:// address must accept a
connection, a name needs a zone and project (the metadata server is asked with a
timeout, not TensorFlow's unbounded wait) and an API that knows it. The driver runs it
before the output directory's lock and params.json (trainer/run/driver.py), so a run
that cannot reach its TPU leaves nothing behind, and the next run without --use_tpu
is not told to use one; the engines then resolve the TPU again for their own use. The Estimator engine passes the resolver to its RunConfig;
the Keras engine connects to it and builds a TPUStrategy (trainer/keras/strategy.py).

    .venv/bin/python -m trainer.task --use_tpu --tpu local ...      # on a TPU VM
    .venv/bin/python -c "from trainer.settings import early_check; print(early_check.local_tpu_devices())"
"""
import os
import socket
import urllib.error
import urllib.request

import tensorflow as tf

# Which TPU is named, and whether 'local' has chips: decided without TensorFlow, where
# trainer.task's early check asks them too.
from trainer.settings.early_check import (LOCAL_TPU as LOCAL, NO_TPU_FIX, TpuNotFound,
                                          check_local_chips, tpu_name)

PROBE_TIMEOUT_SECS = 5  # a TPU's gRPC port or the metadata server answers within this, or not at all


def check_reachable(name, params):
    """TpuNotFound when what name points to cannot answer: no chips for 'local', a grpc://
    address that refuses, a Cloud TPU name without a zone or project to look it up in."""
    if name == LOCAL:
        check_local_chips(name)
    elif name and name.startswith("grpc://"):
        check_accepts_connections(name)
    elif name and not (params["tpu_zone"] and params["gcp_project"]):
        check_metadata_server(name)


def check_accepts_connections(address):
    """TpuNotFound unless host:port of a grpc:// address accepts a TCP connection in time."""
    host, _, port = address[len("grpc://"):].partition(":")
    try:
        socket.create_connection((host, int(port or 8470)), timeout=PROBE_TIMEOUT_SECS).close()
    except (OSError, ValueError) as err:
        raise TpuNotFound(f"use_tpu: nothing answers at --tpu {address} ({err}): check the TPU's "
                          f"address and that it is running; {NO_TPU_FIX}") from None


def metadata_url():
    """The GCE metadata server, where TensorFlow's TPU client looks (GCE_METADATA_HOST overrides)."""
    host = os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_IP", "metadata.google.internal")
    return f"http://{host}/computeMetadata/v1/project/project-id"


def check_metadata_server(name):
    """TpuNotFound when the zone or project of a Cloud TPU name cannot be detected: off Google
    Cloud the metadata server does not answer (TensorFlow would wait for it without limit)."""
    request = urllib.request.Request(metadata_url(), headers={"Metadata-Flavor": "Google"})
    try:
        urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_SECS).close()
    except (OSError, urllib.error.URLError) as err:
        reason = getattr(err, "reason", err)
        raise TpuNotFound(f"use_tpu: --tpu {name!r} is a Cloud TPU name, and off Google Cloud its "
                          f"zone and project cannot be detected (metadata server: {reason}): pass "
                          f"--tpu_zone and --gcp_project; {NO_TPU_FIX}") from None


def check_tpu(params):
    """The driver's check before anything is written: a TPU is named (or this is a TPU VM), what
    names it can answer (check_reachable), and the resolver finds it; TpuNotFound otherwise."""
    check_reachable(tpu_name(params), params)
    resolve_tpu(params)


def resolve_tpu(params):
    """The TPU's cluster resolver, its address looked up now: without a TPU to name, without
    Google Cloud credentials or with a TPU the API does not know, the run stops here in one
    line naming the fix, not deep inside the first training call."""
    name = tpu_name(params)
    try:
        cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=name, zone=params["tpu_zone"], project=params["gcp_project"])
        cluster.master()
    except Exception as err:  # oauth2client's, google.auth's, googleapiclient's or urllib's error types
        explained = explain_lookup_error(err, params)
        if explained is None:
            raise
        raise explained from None
    return cluster


def explain_lookup_error(err, params):
    """The one-line TpuNotFound for a failed lookup of params' TPU; None if err is not one of those."""
    name = type(err).__name__
    if "Credentials" in name:
        return TpuNotFound(
            f"use_tpu: no Google Cloud credentials to look up --tpu={params['tpu']!r}: run "
            f"`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), "
            f"or run on a Cloud TPU VM; {NO_TPU_FIX}")
    if name == "HttpError":
        return TpuNotFound(
            f"use_tpu: the Cloud TPU API could not find --tpu={params['tpu']!r} in zone "
            f"{params['tpu_zone']!r}, project {params['gcp_project']!r}: {err}; {NO_TPU_FIX}")
    if isinstance(err, (OSError, urllib.error.URLError)):
        return TpuNotFound(f"use_tpu: could not look up --tpu={params['tpu']!r} ({err}); {NO_TPU_FIX}")
    return None


def is_local(params):
    """True when the TPU is this host's own chips (no cluster to connect to)."""
    return tpu_name(params) == LOCAL
