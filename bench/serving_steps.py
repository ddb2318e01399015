"""Python work per batched :predict, in process: the batching stand-in's against the floor server's, step by step.

bench/bench_serving_floor.py prints this after its own table, to show where the
stand-in's extra time per request goes. Both servers' real objects do the work,
without sockets or threads: the request bytes go into the stand-in's
RestConnection and the floor's FloorProtocol (their event loops' side: HTTP, JSON,
checks, queueing), and a batch of 8 such requests is handed back the way the batch
thread hands it back (its side: metrics, TF Serving's answer texts, the answer's
bytes, the hand-over to the loop), with the model call and the sockets left out:
they cost both servers the same. Best of `rounds` rounds, microseconds per request.
Every microsecond here runs under the GIL on the batch cycle's critical path (the
8 requests of a cycle are parsed one after another, their answers made one after
another), so an extra x us per request lengthens each 8-request cycle by ~8x us.

    .venv/bin/python -m bench.bench_serving_floor     # prints this table last
"""
import time
import types

import numpy as np

from bench import floor_server
from common import signature
from serving.rest_client import make_rest_predict_body
from serving.standin import (batching, config_files, http_wire, json_writer, metrics as metrics_lib,
                             rest_routes, rest_server, server_core)

BATCH = 8
CALLS = 200  # per round and step


class QueueRecorder:
    """A BatchScheduler stand-in that keeps the tasks it is given (no batch thread)."""

    def __init__(self):
        self.tasks = []

    def schedule(self, key, run_batch, task):
        self.tasks.append(task)

    def stop(self):
        pass


class DropTransport:
    def write(self, data):
        pass


def best_micros(function, rounds, calls=CALLS, per=1):
    """The fastest round's time of function(), in microseconds per call / per."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6 / per


def request_bytes(model_name, jpeg):
    body = rest_routes.encode_json(make_rest_predict_body([jpeg], signature.SIGNATURE_DEFAULT))
    return (f"POST /v1/models/{model_name}:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"User-Agent: bench\r\nAccept: */*\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def standin_parts(base, model_name):
    """(RestServer-like object, its ServerCore, QueueRecorder) with the real core and model."""
    queue = QueueRecorder()
    core = server_core.ServerCore(enable_warmup=False, scheduler=queue)
    core.apply_config(config_files.single_model_config(model_name, base))
    answers = types.SimpleNamespace(hand_over=lambda finish, data: None)
    server = types.SimpleNamespace(
        core=core, metrics=metrics_lib.Metrics(is_batching=True), is_batching=True,
        max_request_bytes=rest_server.DEFAULT_MAX_REQUEST_BYTES, prometheus_path=None,
        loop=types.SimpleNamespace(time=time.monotonic), answers=answers, connections=set())
    return server, core, queue


def standin_loop_side(server, queue, request):
    """One request through a RestConnection on the loop, up to its task in the queue."""
    connection = rest_server.RestConnection(server)
    connection.transport = DropTransport()

    def one():
        connection.data_received(request)
        connection.pending = None
        queue.tasks.clear()
    return one


def standin_batch_tasks(server, queue, request):
    """BATCH tasks as the loop leaves them, each with its connection's request pending."""
    for _ in range(BATCH):
        connection = rest_server.RestConnection(server)
        connection.transport = DropTransport()
        connection.data_received(request)
    tasks, queue.tasks = list(queue.tasks), []
    return tasks


def batch_side(tasks, outputs):
    """The batch thread's work after the model call: outputs split, each task released."""
    def one():
        batching.split_outputs(batching.Batch(tasks, BATCH, 0.0), outputs, BATCH)
        for task in tasks:
            task.done.release()
    return one


def floor_parts(answer):
    queue = QueueRecorder()
    answers = types.SimpleNamespace(hand_over=lambda finish, data: None)
    protocol = floor_server.FloorProtocol(floor_server.image_queuer(answers, queue, None, answer))
    protocol.connection_made(DropTransport())
    return protocol, queue


def measure(base, model_name, jpeg, rounds=5):
    """[(side, step, stand-in us, floor us or None)] per request."""
    server, core, queue = standin_parts(base, model_name)
    try:
        served = core.get(model_name)
        request = request_bytes(model_name, jpeg)
        outputs = served.run_signature(signature.SIGNATURE_DEFAULT, {
            signature.INPUT_IMAGE_BYTES: np.array([jpeg] * BATCH, dtype=object)})
        answer = floor_server.make_answer(served, jpeg)
        protocol, floor_queue = floor_parts(answer)

        def floor_loop_one():
            protocol.data_received(request)
            floor_queue.tasks.clear()
        floor_loop = best_micros(floor_loop_one, rounds)
        for _ in range(BATCH):
            protocol.data_received(request)
        floor_tasks = list(floor_queue.tasks)
        rows = [
            ("loop", "whole", best_micros(standin_loop_side(server, queue, request), rounds),
             floor_loop),
            ("loop", "  HTTP request read", best_micros(lambda: read_request(request), rounds),
             None),
            ("loop", "  :predict body and checks", best_micros(
                lambda: body_and_checks(core, model_name, request), rounds), None),
            ("batch", "whole", best_micros(batch_side(standin_batch_tasks(server, queue, request),
                                                      outputs), rounds, per=BATCH),
             best_micros(batch_side(floor_tasks, outputs), rounds, per=BATCH)),
            ("batch", "  answer texts (floats etc.)", best_micros(
                lambda: rest_routes.make_row_texts(outputs), rounds, per=BATCH), None),
        ]
    finally:
        core.stop()
    return rows


def read_request(request):
    reader = http_wire.RequestReader(rest_server.DEFAULT_MAX_REQUEST_BYTES)
    reader.feed(request)
    return reader.next_event()


def body_and_checks(core, model_name, request):
    body = request[request.index(b"\r\n\r\n") + 4:]
    signature_name, is_row, payload = rest_routes.parse_predict_body(body)
    served = core.get(model_name)
    name, signature_def = served.resolve_signature(signature_name)
    inputs = rest_routes.extract_inputs(is_row, payload, signature_def.inputs)
    return served.checked_inputs(name, inputs)


def print_table(rows):
    print(f"\nPython per batched :predict, in process (best of rounds; model call and sockets "
          f"excluded), us per request")
    print(f"{'side':<7}{'step':<32}{'stand-in':>9}{'floor':>8}{'extra':>8}")
    extra_total = 0.0
    for side, step, standin, floor in rows:
        extra = "" if floor is None else f"{standin - floor:>8.1f}"
        extra_total += 0.0 if floor is None else standin - floor
        floor_text = "" if floor is None else f"{floor:>8.1f}"
        print(f"{side:<7}{step:<32}{standin:>9.1f}{floor_text:>8}{extra}")
    print(f"(extra per request {extra_total:.0f} us: ~{BATCH * extra_total / 1000:.2f} ms more per "
          f"{BATCH}-request batch cycle, all of it under the GIL on the cycle's critical path)")

