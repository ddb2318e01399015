"""Python work per batched :predict, in process: the batching stand-in's against the floor server's, step by step.

bench/bench_serving_floor.py --steps prints this table, to show where the
stand-in's extra time per request goes. Both servers' real objects do the work,
without sockets or threads: the request bytes go into the stand-in's HTTP
reader (http_wire.read_request, what its connection thread runs before
answering) and the floor's FloorProtocol (its event loop's side: HTTP, JSON and
queueing), then the stand-in's answering side
(rest_server.handle_request: routing, the :predict body and TF Serving's checks,
metrics, the answer's texts and bytes) against the floor's hand-over of its
ready-made answer, with the model call, the batch's wait and the sockets left
out: they cost both servers the same. Best of `rounds` rounds, microseconds per
request. Every microsecond here runs under the GIL, so an extra x us per request
lengthens each 8-request batch cycle by ~8x us.

    .venv/bin/python -m bench.bench_serving_floor --steps     # prints this table
"""
import io
import time
import types

import numpy as np

from bench import floor_server, report
from common import signature
from serving.rest_client import make_rest_predict_body
from serving.standin import (config_files, http_wire, metrics as metrics_lib, rest_routes,
                             rest_server, server_core)

BATCH = 8
CALLS = 200  # per round and step


class ImmediateScheduler:
    """A BatchScheduler stand-in without batch threads: run() returns the model's outputs
    for one image at once; schedule() keeps the task."""

    def __init__(self):
        self.outputs, self.tasks = None, []

    def run(self, key, run_batch, inputs):
        return self.outputs

    def schedule(self, key, run_batch, task):
        self.tasks.append(task)

    def stop(self):
        pass


class DropTransport:
    def write(self, data):
        pass


def best_micros(function, rounds, calls=CALLS):
    """The fastest round's time of function(), in microseconds per call."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def request_bytes(model_name, jpeg):
    body = rest_routes.encode_json(make_rest_predict_body([jpeg], signature.SIGNATURE_DEFAULT))
    return (f"POST /v1/models/{model_name}:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"User-Agent: bench\r\nAccept: */*\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def standin_parts(base, model_name):
    """(RestServer-like object, its ServerCore, ImmediateScheduler) with the real core and model."""
    scheduler = ImmediateScheduler()
    core = server_core.ServerCore(enable_warmup=False, scheduler=scheduler)
    core.apply_config(config_files.single_model_config(model_name, base))
    server = types.SimpleNamespace(
        core=core, metrics=metrics_lib.Metrics(is_batching=True),
        max_request_bytes=rest_server.DEFAULT_MAX_REQUEST_BYTES, prometheus_path=None)
    return server, core, scheduler


def standin_worker_side(server, request):
    """A connection thread's answer: handle_request, then the answer's bytes."""
    event = read_request(request)

    def one():
        status, answer = rest_server.handle_request(server, "POST", event.head.target, event.body)
        return rest_server.json_answer(event.head, status, answer)
    return one


def floor_parts(answer):
    queue = ImmediateScheduler()
    protocol = floor_server.FloorProtocol(floor_server.image_queuer(
        lambda write, data: None, queue, None, answer))
    protocol.connection_made(DropTransport())
    return protocol, queue


def measure(base, model_name, jpeg, rounds=5):
    """[(side, step, stand-in us, floor us or None)] per request."""
    server, core, scheduler = standin_parts(base, model_name)
    try:
        served = core.get(model_name)
        request = request_bytes(model_name, jpeg)
        scheduler.outputs = served.run_signature(signature.SIGNATURE_DEFAULT, {
            signature.INPUT_IMAGE_BYTES: np.array([jpeg], dtype=object)})
        protocol, floor_queue = floor_parts(floor_server.make_answer(served, jpeg))

        def floor_loop_one():
            protocol.data_received(request)
            floor_queue.tasks.clear()
        floor_loop = best_micros(floor_loop_one, rounds)
        protocol.data_received(request)
        floor_task = floor_queue.tasks[0]
        rows = [
            ("read", "HTTP request read", best_micros(lambda: read_request(request), rounds),
             floor_loop),
            ("answer", "whole", best_micros(standin_worker_side(server, request), rounds),
             best_micros(lambda: floor_task.when_done(None, None), rounds)),
            ("answer", "  :predict body and checks", best_micros(
                lambda: body_and_checks(core, model_name, request), rounds), None),
            ("answer", "  answer texts (floats etc.)", best_micros(
                lambda: rest_routes.make_row_texts(scheduler.outputs), rounds), None),
        ]
    finally:
        core.stop()
    return rows


def read_request(request):
    return http_wire.read_request(io.BytesIO(request), rest_server.DEFAULT_MAX_REQUEST_BYTES)


def body_and_checks(core, model_name, request):
    body = request[request.index(b"\r\n\r\n") + 4:]
    signature_name, is_row, payload = rest_routes.parse_predict_body(body)
    served = core.get(model_name)
    name, signature_def = served.resolve_signature(signature_name)
    inputs = rest_routes.extract_inputs(is_row, payload, signature_def.inputs)
    return served.checked_inputs(name, inputs)


def print_report(out, header, rows):
    """bench/report.py's one table of measure's rows, the extra per request summed below it."""
    table = [[side, step, f"{standin:.1f}", "" if floor is None else f"{floor:.1f}",
              "" if floor is None else f"{standin - floor:.1f}"] for side, step, standin, floor in rows]
    extra_total = sum(standin - floor for _, _, standin, floor in rows if floor is not None)
    report.print_report(
        out, "bench_serving_floor --steps: Python per batched :predict, in process (best of "
        "rounds; model call and sockets excluded), us per request", header,
        ["side", "step", "stand-in", "floor", "extra"], table, (),
        [f"extra per request {extra_total:.0f} us: ~{BATCH * extra_total / 1000:.2f} ms more per "
         f"{BATCH}-request batch cycle, all of it under the GIL on the cycle's critical path"])

