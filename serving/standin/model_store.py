"""One model of the stand-in server: the registry of its served versions, and their statuses.

refresh() (every --file_system_poll_wait_seconds) lists the complete versions, lets the
policy choose, loads each new wanted one with its warmup, then swaps the set in: requests
in flight keep their version, and loaded versions are immutable, so requests need no
lock. A failed load is skipped (for `latest` the next highest serves) and retried when
its files change. GetModelStatus lists every version seen: served ones AVAILABLE,
replaced, deleted and failed ones END (a failed one with its error).

    .venv/bin/python -c "from serving.standin import model_store as m; s = m.ModelStore('m', 'OUT/export/image_classifier'); print(s.refresh().version)"
"""
import collections
import logging
import os
import threading

import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow_serving.apis import get_model_status_pb2, status_pb2

from common import export_versions

from serving.standin import errors
from serving.standin.served_version import ServedVersion, warm_up
from serving.standin.version_policy import fingerprint_version, select_versions

log = logging.getLogger(__name__)
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE
END = get_model_status_pb2.ModelVersionStatus.END
# tensorflow.error.Code values, the type of a version status' error_code
OK, UNKNOWN, NOT_FOUND, DATA_LOSS = 0, 2, 5, 15
# One version's line in GetModelStatus: state is AVAILABLE or END, error_code OK unless it failed.
VersionStatus = collections.namedtuple("VersionStatus", "state error_code error_message")
SERVING_OK = VersionStatus(AVAILABLE, OK, "")
UNLOADED_OK = VersionStatus(END, OK, "")


def load_error_code(error):
    """The tensorflow.error.Code TF Serving would report for a failed load."""
    if isinstance(error, tf.errors.OpError):
        return error.error_code
    if isinstance(error, errors.ServingError):  # a warmup request failed
        return error.grpc_code.value[0]  # gRPC and TF share the canonical codes
    if isinstance(error, DecodeError):  # TF's ReadBinaryProto: "Can't parse ... as binary proto"
        return DATA_LOSS
    return NOT_FOUND if isinstance(error, FileNotFoundError) else UNKNOWN


def servable_not_found(model_name, version):
    """TF Serving's NotFound, naming what the request asked for: Latest(m) or Specific(m, v)."""
    spec = f"Specific({model_name}, {version})" if version is not None else f"Latest({model_name})"
    return errors.NotFound(f"Servable not found for request: {spec}")


class ModelStore:
    """The versions of one model that its policy serves; refresh() follows its base path."""

    def __init__(self, model_name, model_base_path, enable_warmup=True, policy=None,
                 scheduler=None):
        self.model_name = model_name
        self.model_base_path = model_base_path
        self.enable_warmup = enable_warmup
        self.policy = policy        # a ModelVersionPolicy proto; None: the latest version
        self.scheduler = scheduler  # a batching.BatchScheduler with --enable_batching
        self._served = {}    # version -> ServedVersion answering requests; replaced whole
        self._failed = {}    # version -> fingerprint of the failed load: retried when it changes
        self._statuses = {}  # version -> VersionStatus; replaced whole, so readers need no lock
        self._refresh_lock = threading.Lock()
        self._is_retired = False  # left the config: never loads again (a new store would)

    def refresh(self):
        """The highest served ServedVersion (or None) once the policy's choice of the loadable
        versions present serves; a retired store (the poller may still hold it) serves nothing."""
        with self._refresh_lock:
            if self._is_retired:
                return None
            present = export_versions.list_versions(self.model_base_path)
            self._failed = {v: f for v, f in self._failed.items() if v in present}
            served = {v: s for v, s in self._served.items() if v in present}
            failed_now = set()  # tried in this refresh: never twice, even if files still change
            while True:
                loadable = [v for v in present
                            if v not in failed_now and not self._is_stale_failure(v)]
                wanted = select_versions(self.policy, loadable)
                missing = sorted(wanted - set(served), reverse=True)
                if not missing:
                    break
                loaded = self._load(missing[0])
                if loaded is None:
                    failed_now.add(missing[0])
                else:
                    served[loaded.version] = loaded
            self._swap_in({v: served[v] for v in wanted})
            return self.latest()

    def _is_stale_failure(self, version):
        """True when the version failed to load and its files have not changed since."""
        if version not in self._failed:
            return False
        path = os.path.join(self.model_base_path, str(version))
        return self._failed[version] == fingerprint_version(path)

    def _load(self, version):
        path = os.path.join(self.model_base_path, str(version))
        fingerprint = fingerprint_version(path)  # taken before the load: a copy mid-load retries
        try:
            served = ServedVersion(self.model_name, version, path, self.scheduler)
            count = warm_up(served) if self.enable_warmup else 0
        except (OSError, ValueError, DecodeError, tf.errors.OpError, errors.ServingError) as e:
            log.error("model %s version %d at %s failed to load (retried when its files "
                      "change): %s", self.model_name, version, path, e)
            self._failed[version] = fingerprint
            self._set_status(version, VersionStatus(END, load_error_code(e), str(e)))
            return None
        self._failed.pop(version, None)
        log.info("model %s: serving version %d from %s (%d warmup requests replayed)",
                 self.model_name, version, path, count)
        return served

    def _swap_in(self, served):
        """Makes served answer requests; the versions it drops are reported END."""
        previous, self._served = self._served, served
        for version in sorted(set(previous) - set(served)):
            if served and version > max(served):
                log.warning("model %s: version %d was removed; falling back to version %d",
                            self.model_name, version, max(served))
            elif not served:
                log.warning("model %s: version %d was removed and no other version loads; "
                            "serving nothing", self.model_name, version)
            self._set_status(version, UNLOADED_OK)
        for version in served:
            if self._statuses.get(version) != SERVING_OK:
                self._set_status(version, SERVING_OK)

    def _set_status(self, version, status):
        self._statuses = {**self._statuses, version: status}

    def latest(self):
        """The highest served version, or None."""
        served = self._served
        return served[max(served)] if served else None

    def served_versions(self):
        return sorted(self._served)

    def get(self, version=None):
        """The ServedVersion for a request; NotFound in TF Serving's words otherwise."""
        served = self._served
        number = max(served, default=None) if version is None else int(version)
        if number not in served:
            raise servable_not_found(self.model_name, version)
        return served[number]

    def statuses(self):
        """{version: VersionStatus} of every version seen."""
        return self._statuses

    def retire(self):
        """The model left the config: nothing is served, every version is reported END."""
        with self._refresh_lock:
            self._is_retired = True
            self._swap_in({})


def format_status(model_name, statuses, version=None):
    """GetModelStatusResponse for statuses (highest version first, TF Serving's VersionMap
    order), or TF Serving's NotFound (get_model_status_impl.cc) when nothing matches."""
    if version is not None:
        statuses = {v: s for v, s in statuses.items() if v == int(version)}
        if not statuses:
            raise errors.NotFound(f"Could not find version {version} of model {model_name}")
    elif not statuses:
        raise errors.NotFound(f"Could not find any versions of model {model_name}")
    response = get_model_status_pb2.GetModelStatusResponse()
    for number in sorted(statuses, reverse=True):
        state, code, message = statuses[number]
        response.model_version_status.add(version=number, state=state, status=(
            status_pb2.StatusProto(error_code=code, error_message=message)))
    return response
