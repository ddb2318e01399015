"""The least a Python REST server can do per batched predict: the floor bench/bench_serving_floor.py measures.

One asyncio event-loop thread reads each request (a head and a Content-Length
body, keep-alive), parses the JSON, base64-decodes the one image and queues it in
the stand-in's own BatchScheduler (serving/standin/batching.py: batch threads
merge concurrent requests into one call of the real SavedModel through
ServedVersion.run_signature, the stand-in's model call). When the batch is done
the loop writes an answer made once at start-up: the model's answer for one image,
formatted as the stand-in formats it, handed to the loop as the stand-in's are
(loop.call_soon_threadsafe). Nothing else: no HTTP beyond
that, no routing, no input checks, no float texts per answer, no metrics, no error
answers. Any server that answers TF Serving's :predict does at least this work per
request, so under the same load it cannot serve more requests per second than this
one (give or take the machine's noise).

    .venv/bin/python -m bench.floor_server --port 8601 --model_base_path OUT/export/image_classifier \
        --batching_parameters_file batching.txt
"""
import asyncio
import base64
import json
import os

from common import console


def build_parser():
    parser = console.ArgumentParser(prog="python -m bench.floor_server",
                                    description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model_base_path", required=True)
    parser.add_argument("--batching_parameters_file", required=True)
    parser.add_argument("--answer_jpeg", required=True, help="the image whose answer is sent")
    return parser


if __name__ == "__main__":  # --help and flag mistakes answer before TensorFlow loads;
    build_parser().parse_args()  # the entry point below parses them again


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import export_versions, signature  # noqa: E402
from serving.standin import (batching, config_files, json_writer, rest_routes,  # noqa: E402
                             served_version)

READY_LINE = "floor_server: ready"


def http_answer(status, body):
    head = (f"HTTP/1.1 {status}\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def error_answer(error):
    return http_answer("500 Internal Server Error", json.dumps({"error": str(error)}).encode())


def content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class FloorProtocol(asyncio.Protocol):
    """One connection: complete requests are taken off the buffer and queued as they arrive."""

    def __init__(self, queue_image):
        self.queue_image = queue_image
        self.transport, self.buffer = None, b""

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = content_length(self.buffer[:end])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            image = base64.b64decode(json.loads(body)["instances"][0]["b64"])
            self.queue_image(image, self.transport)


def load_model(model_base_path):
    version = console.exit_on_user_error(export_versions.require_latest_version, model_base_path)
    return served_version.ServedVersion(
        "floor", version, export_versions.version_dir(model_base_path, version))


def make_answer(served, jpeg):
    """HTTP/1.1 answer bytes: the model's prediction for one image, as the stand-in writes it."""
    outputs = served.run_signature(signature.SIGNATURE_DEFAULT,
                                   {signature.INPUT_IMAGE_BYTES: np.array([jpeg], dtype=object)})
    return http_answer("200 OK", json_writer.encode_json(
        rest_routes.format_predictions(outputs, is_row=True)))


def image_queuer(hand_over, scheduler, run_batch, answer):
    """queue_image(image, transport) for FloorProtocol: the image queued as a batch-1 task;
    when its batch is done the batch thread hands the ready-made answer (or a 500, so a
    broken measurement shows) to the loop (hand_over(transport.write, data)), which writes it."""
    def queue_image(image, transport):
        inputs = np.empty(1, dtype=object)
        inputs[0] = image

        def when_done(outputs, error):
            hand_over(transport.write, answer if error is None else error_answer(error))

        task = batching.Task({signature.INPUT_IMAGE_BYTES: inputs}, when_done)
        scheduler.schedule(signature.SIGNATURE_DEFAULT, run_batch, task)
    return queue_image


async def serve(args):
    loop = asyncio.get_running_loop()
    served = load_model(args.model_base_path)
    scheduler = batching.BatchScheduler(
        config_files.read_batching_parameters(args.batching_parameters_file))
    with open(args.answer_jpeg, "rb") as f:
        answer = make_answer(served, f.read())  # what every request gets

    def run_batch(merged):
        return served.run_signature(signature.SIGNATURE_DEFAULT, merged)

    queue_image = image_queuer(loop.call_soon_threadsafe, scheduler, run_batch, answer)
    server = await loop.create_server(lambda: FloorProtocol(queue_image),
                                      "127.0.0.1", args.port, backlog=128)
    print(READY_LINE, flush=True)
    await server.serve_forever()


def main(argv=None):
    asyncio.run(serve(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
