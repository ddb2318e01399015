"""TF Serving's request metrics, served in its Prometheus text format (--monitoring_config_file).

Names, labels, bucket limits and the page are TF Serving's (servables/tensorflow/util.cc,
batching_session.cc, util/prometheus_exporter.cc), so a dashboard written for TF Serving
reads the stand-in. Metrics: one server's; PROCESS: what TF's registry holds
process-wide. docs/serving.md lists them all.

    curl http://127.0.0.1:8501/monitoring/prometheus/metrics
"""
import bisect
import contextlib
import threading
import time
import types

from serving.standin import errors

REQUEST_COUNT = "/tensorflow/serving/request_count"
REQUEST_LATENCY = "/tensorflow/serving/request_latency"
WRAPPED_RUN_COUNT = "/tensorflow/serving/batching_session/wrapped_run_count"
QUEUING_LATENCY = "/tensorflow/serving/batching_session/queuing_latency"
# TensorFlow's (cc/saved_model/loader.cc, core/framework/metrics.cc) and TF Serving's
# servables/tensorflow/util.cc process-wide metrics.
LOAD_ATTEMPT_COUNT = "/tensorflow/cc/saved_model/load_attempt_count"
LOAD_LATENCY = "/tensorflow/cc/saved_model/load_latency"
GRAPH_RUNS = "/tensorflow/core/graph_runs"
GRAPH_RUN_TIME_USECS = "/tensorflow/core/graph_run_time_usecs"
GRAPH_RUN_TIME_HISTOGRAM = "/tensorflow/core/graph_run_time_usecs_histogram"
RUNTIME_LATENCY = "/tensorflow/serving/runtime_latency"
EXAMPLE_COUNTS = "/tensorflow/serving/request_example_counts"
EXAMPLE_COUNT_TOTAL = "/tensorflow/serving/request_example_count_total"
MODEL_WARMUP_LATENCY = "/tensorflow/serving/model_warmup_latency"  # saved_model_warmup_util.cc
RUNTIME = "TF1"  # TF Serving's runtime label for a SavedModel run in a TF session


def exponential_limits(scale, growth_factor, count):
    """monitoring::Buckets::Exponential: scale * growth^i for i < count (then +Inf)."""
    return [scale * growth_factor ** i for i in range(count)]


def format_double(value):
    """A double as absl::StrCat prints it: six significant digits, %g style."""
    return f"{value:.6g}"


class Counter:
    """A monitoring::Counter: an integer per tuple of label values."""
    kind = "counter"

    def __init__(self, name, label_names):
        self.name, self.label_names, self.cells = name, tuple(label_names), {}

    def add(self, labels, amount=1):
        self.cells[labels] = self.cells.get(labels, 0) + amount

    def lines(self):
        for labels, value in self.cells.items():
            yield f"{self.prometheus_name}{{{format_labels(self.label_names, labels)}}} {value}"

    @property
    def prometheus_name(self):
        return prometheus_name(self.name)


class Histogram(Counter):
    """A monitoring::Sampler: a value lands in the first bucket whose limit exceeds it
    (std::upper_bound, as TF's Histogram::Add), so "le" is exclusive there too."""
    kind = "histogram"

    def __init__(self, name, label_names, limits):
        super().__init__(name, label_names)
        self.limits = limits

    def add(self, labels, value):
        counts, total = self.cells.get(labels, ([0] * (len(self.limits) + 1), 0.0))
        counts[bisect.bisect_right(self.limits, value)] += 1
        self.cells[labels] = (counts, total + value)

    def lines(self):
        for labels, (counts, total) in self.cells.items():
            text = format_labels(self.label_names, labels)
            prefix = f"{self.prometheus_name}_bucket{{{text}{',' if text else ''}"
            cumulative = 0
            for limit, count in zip(self.limits + [None], counts):
                cumulative += count
                bound = "+Inf" if limit is None else format_double(limit)
                yield f'{prefix}le="{bound}"}} {cumulative}'
            yield f"{self.prometheus_name}_sum{{{text}}} {format_double(total)}"
            yield f"{self.prometheus_name}_count{{{text}}} {cumulative}"


def prometheus_name(name):
    """TF Serving's GetPrometheusMetricName: every character outside [a-zA-Z0-9_] becomes ':',
    and a leading digit gets a '_' before it."""
    text = "".join(c if c.isascii() and (c.isalnum() or c == "_") else ":" for c in name)
    return f"_{text}" if text[:1].isdigit() else text


def format_labels(names, values):
    escaped = (str(v).replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return ",".join(f'{name}="{value}"' for name, value in zip(names, escaped))


class Registry:
    """Metrics by TF name behind one lock; every method is safe to call from request threads."""

    def __init__(self, metrics):
        self.lock = threading.Lock()
        self.metrics = metrics
        self.by_name = {metric.name: metric for metric in metrics}

    def add(self, name, labels, value=1):
        with self.lock:
            self.by_name[name].add(labels, value)


class ProcessMetrics(Registry):
    """TF's process-wide metrics (CollectionRegistry::Default) that the stand-in measures."""

    def __init__(self):
        super().__init__([
            Counter(LOAD_ATTEMPT_COUNT, ("model_path", "status")),
            Counter(LOAD_LATENCY, ("model_path",)),
            Counter(GRAPH_RUNS, ()), Counter(GRAPH_RUN_TIME_USECS, ()),
            Histogram(GRAPH_RUN_TIME_HISTOGRAM, (), exponential_limits(1000, 2, 20)),
            Histogram(RUNTIME_LATENCY, ("model_name", "API", "runtime"),
                      exponential_limits(10, 1.8, 33)),
            Histogram(EXAMPLE_COUNTS, ("model",), exponential_limits(1, 2, 15)),
            Counter(EXAMPLE_COUNT_TOTAL, ("model",)),
            Histogram(MODEL_WARMUP_LATENCY, ("model_path", "status"),
                      exponential_limits(10, 1.8, 33))])

    def record_load(self, model_path, is_ok, seconds):
        """One SavedModel load attempt; its latency only when it succeeded (as TF's loader)."""
        self.add(LOAD_ATTEMPT_COUNT, (model_path, "success" if is_ok else "fail"))
        if is_ok:
            self.add(LOAD_LATENCY, (model_path,), int(seconds * 1e6))

    def record_graph_run(self, seconds):
        """One model call (TF's UpdateGraphExecTime: runs under a microsecond are not counted)."""
        micros = int(seconds * 1e6)
        if micros > 0:
            self.add(GRAPH_RUNS, ())
            self.add(GRAPH_RUN_TIME_USECS, (), micros)
            self.add(GRAPH_RUN_TIME_HISTOGRAM, (), micros)

    def record_runtime(self, model_name, api, seconds):
        """The model call of one Predict/Classify/Regress (with batching: queue included)."""
        self.add(RUNTIME_LATENCY, (model_name, api, RUNTIME), int(seconds * 1e6))

    def record_warmup(self, model_path, seconds):
        """A warm-up that replayed a version's warmup file to its end (TF Serving records
        none when the file is absent or a request fails); its status label is "OK"."""
        self.add(MODEL_WARMUP_LATENCY, (model_path, "OK"), int(seconds * 1e6))

    def record_examples(self, model_name, count):
        """The tf.Examples of one Classify/Regress/MultiInference request."""
        self.add(EXAMPLE_COUNTS, (model_name,), count)
        self.add(EXAMPLE_COUNT_TOTAL, (model_name,), count)


PROCESS = ProcessMetrics()


class Metrics(Registry):
    """One server's request metrics; render() writes them with the process-wide ones."""

    def __init__(self, is_batching=False):
        latency_limits = exponential_limits(10, 1.8, 33)  # 10 us .. ~20 minutes, as TF Serving
        metrics = [Counter(REQUEST_COUNT, ("model_name", "status")),
                   Histogram(REQUEST_LATENCY, ("model_name", "API", "entrypoint"), latency_limits)]
        if is_batching:
            metrics += [Counter(WRAPPED_RUN_COUNT, ()),
                        Histogram(QUEUING_LATENCY, ("thread_pool_name",),
                                  exponential_limits(100, 1.2, 52))]
        super().__init__(metrics)

    def record_request(self, model_name, api, entrypoint, status_name, seconds):
        """One Predict/Classify/Regress call: counted by status; its latency only when OK
        (TF Serving records latency for successful requests only)."""
        self.add(REQUEST_COUNT, (model_name, status_name))
        if status_name == "OK":
            self.add(REQUEST_LATENCY, (model_name, api, entrypoint), int(seconds * 1e6))

    def record_batch(self, thread_pool_name, queued_seconds):
        """One merged model call and how long each of its requests waited in the queue."""
        self.add(WRAPPED_RUN_COUNT, ())
        for seconds in queued_seconds:
            self.add(QUEUING_LATENCY, (thread_pool_name,), int(seconds * 1e6))

    def render(self):
        """The Prometheus page: metrics sorted by TF name (TF's registry map order)."""
        with self.lock, PROCESS.lock:
            lines = []
            for metric in sorted(self.metrics + PROCESS.metrics, key=lambda m: m.name):
                lines.append(f"# TYPE {metric.prometheus_name} {metric.kind}")
                lines.extend(metric.lines())
        return "\n".join(lines) + "\n"


def int64_value(metrics, name):
    """ReloadConfigResponse's value of a metric (in a server's Metrics, or None, or PROCESS):
    its first point's integer (label order); 0 for a histogram, an empty or unknown one."""
    for registry in [PROCESS] + ([metrics] if metrics is not None else []):
        with registry.lock:
            metric = registry.by_name.get(name)
            if metric is not None:
                is_counted = metric.kind == "counter" and metric.cells
                return metric.cells[min(metric.cells)] if is_counted else 0
    return 0


@contextlib.contextmanager
def track(metrics, model_name, api, entrypoint):
    """Records the with-block's request: its status (OK, a ServingError's code name, else
    UNKNOWN) and latency; the block may set model_name and api on the record it gets."""
    record = types.SimpleNamespace(model_name=model_name, api=api)
    start, status = time.perf_counter(), "UNKNOWN"
    try:
        yield record
        status = "OK"
    except errors.ServingError as e:
        status = e.code_name
        raise
    finally:
        if metrics is not None:
            metrics.record_request(record.model_name, record.api, entrypoint, status,
                                   time.perf_counter() - start)
