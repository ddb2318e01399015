"""The stand-in's models by name: TF Serving's ServerCore for a ModelServerConfig.

A config (from --model_name/--model_base_path, or --model_config_file) is applied whole;
get() resolves a request's model and version or label with TF Serving's errors. A label
may name only an AVAILABLE version unless --allow_version_labels_for_unavailable_models
is set, so at start-up, without the flag, every label is refused, as TF Serving refuses it.

    .venv/bin/python -m serving.standin.server --model_config_file models.config \
        --allow_version_labels_for_unavailable_models=true
"""
import logging
import threading

from serving.standin import config_files, errors, model_store, served_version

log = logging.getLogger(__name__)


class ServerCore:
    """Model stores by name and their labels; applies configs and polls for changes."""

    def __init__(self, enable_warmup=True, allow_unavailable_labels=False, scheduler=None):
        self.enable_warmup = enable_warmup
        self.allow_unavailable_labels = allow_unavailable_labels
        self.scheduler = scheduler
        self.config = None
        self._stores = {}   # model name -> ModelStore; replaced whole, so readers need no lock
        self._retired = {}  # model name -> ModelStore of a model the config dropped (status END)
        self._labels = {}   # model name -> {label: version}; replaced whole
        self._config_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []

    def apply_config(self, config):
        """Serves config's models (loading new versions now), then its labels; ConfigFileError,
        nothing changed, for a relative base path or a label not allowed."""
        config_files.check_base_paths(config)
        with self._config_lock:
            labels = self._check_labels(config)
            stores = {model.name: self._store_for(model) for model in config.model_config_list.config}
            for name in set(self._stores) - set(stores):
                log.info("model %s: dropped from the config; unloading it", name)
                self._stores[name].retire()
                self._retired[name] = self._stores[name]
            for name in stores:
                self._retired.pop(name, None)
            self._stores, self.config = stores, config
            for store in stores.values():
                store.refresh()
            self._labels = labels

    def _store_for(self, model):
        """The model's existing store, updated in place, or a new one for a new base path."""
        store = self._stores.get(model.name)
        if store is None or store.model_base_path != model.base_path:
            store = model_store.ModelStore(model.name, model.base_path, self.enable_warmup,
                                           scheduler=self.scheduler)
        store.policy = model.model_version_policy
        return store

    def _check_labels(self, config):
        """{model: {label: version}} of config; ConfigFileError for a label not allowed."""
        labels = {}
        for model in config.model_config_list.config:
            store = self._stores.get(model.name)
            available = set(store.served_versions()) if store is not None else set()
            for label, version in sorted(model.version_labels.items()):
                previous = self._labels.get(model.name, {}).get(label, version)
                is_allowed = self.allow_unavailable_labels and previous == version
                if version not in available and not is_allowed:
                    raise config_files.LabelNotAllowedError(
                        f"FAILED_PRECONDITION: Request to assign label to version {version} of "
                        f"model {model.name}, which is not currently available for inference "
                        "(pass --allow_version_labels_for_unavailable_models=true to allow it)")
                labels.setdefault(model.name, {})[label] = version
        return labels

    def get(self, model_name, version=None, label=None):
        """The ServedVersion a request names, with TF Serving's errors (server_core.cc)."""
        if not model_name:
            raise errors.InvalidArgument("ModelSpec has no name specified.")
        if label is not None:
            version = self._labels.get(model_name, {}).get(label)
            if version is None:
                raise errors.InvalidArgument(f"Unrecognized servable version label: {label}")
        store = self._stores.get(model_name)
        if store is None:
            raise model_store.servable_not_found(model_name, version)
        return store.get(version)

    def get_status(self, model_name, version=None):
        """GetModelStatusResponse; labels are ignored, as TF Serving ignores them here."""
        store = self._stores.get(model_name) or self._retired.get(model_name)
        statuses = store.statuses() if store is not None else {}
        return model_store.format_status(model_name, statuses, version)

    def model_names(self):
        return sorted(self._stores)

    def refresh(self):
        """{model name: highest served or None} after every base path is re-scanned; versions
        unloaded by now are freed whole (served_version.collect_released)."""
        served = {name: store.refresh() for name, store in self._stores.items()}
        seconds = served_version.collect_released()
        if seconds is not None:
            log.debug("freed unloaded versions: a full garbage collection took %.3f s", seconds)
        return served

    def start_polling(self, poll_seconds, config_file=None, config_poll_seconds=0):
        """Daemon threads polling base paths and (config_poll_seconds > 0) the config file."""
        self._start_thread("model-poller", poll_seconds, self.refresh)
        if config_file and config_poll_seconds > 0:
            self._start_thread("config-poller", config_poll_seconds,
                               lambda: self.reload_config_file(config_file))

    def _start_thread(self, name, seconds, action):
        def loop():
            while not self._stop.wait(seconds):
                try:
                    action()
                except Exception:  # the poller's boundary: log, keep serving what is loaded
                    log.exception("%s failed; serving what is loaded", name)
        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def reload_config_file(self, path):
        """Applies the file if it changed; a bad file is logged and the old config kept."""
        try:
            config = config_files.read_model_server_config(path)
            if config == self.config:
                return False
            self.apply_config(config)
        except config_files.ConfigFileError as e:
            log.error("Failed to reload the model config (still serving the previous one): %s", e)
            return False
        log.info("reloaded %s: serving models %s", path, self.model_names())
        return True

    def stop(self):
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self.scheduler is not None:
            self.scheduler.stop()
