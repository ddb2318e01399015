"""Low-cost predict clients for bench/bench_serving.py: they measure the server, not the client.

On 2 cores every millisecond of CPU the load generator spends is taken from the
server it measures. RestClient costs ~0.22 ms of CPU per batch-1 predict (JSON,
base64, http.client), GrpcClient ~0.44 ms (tf.make_tensor_proto, tf.make_ndarray);
these send request bytes encoded once per input and cost ~0.05 ms (REST) and
~0.25 ms (gRPC, most of it grpc's own Python). Every answer is still checked:
REST: status 200, a Content-Length body read in full, JSON with one prediction
per image; gRPC: status OK and a PredictResponse whose outputs hold one row per image.
Each client has predict(jpegs) and close(), as bench/loadgen.py expects.

    .venv/bin/python -m bench.bench_serving
"""
import json
import socket

import grpc
from tensorflow_serving.apis import predict_pb2

from common import predict_protos, signature
from serving.rest_client import make_rest_predict_body

PREDICT_METHOD = "/tensorflow.serving.PredictionService/Predict"
MAX_HEADER_BYTES = 64 * 1024


class RawRestClient:
    """Predicts over one kept-alive HTTP/1.1 socket; the request bytes of a batch are built once."""

    def __init__(self, host, port, model_name, timeout=60):
        self.path = f"/v1/models/{model_name}:predict"
        self.host = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.requests = {}  # tuple(jpegs) -> request bytes

    def request_bytes(self, jpegs):
        key = tuple(jpegs)
        if key not in self.requests:
            body = json.dumps(make_rest_predict_body(jpegs, signature.SIGNATURE_DEFAULT)).encode()
            head = (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
            self.requests[key] = head.encode("latin-1") + body
        return self.requests[key]

    def predict(self, jpegs):
        """The parsed answer; RuntimeError for a status other than 200 or a short answer."""
        self.sock.sendall(self.request_bytes(jpegs))
        status, length = self.read_head()
        body = self.read_exactly(length)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
        predictions = json.loads(body)["predictions"]
        if len(predictions) != len(jpegs):
            raise RuntimeError(f"{len(predictions)} predictions for {len(jpegs)} images")
        return predictions

    def read_head(self):
        """(status, Content-Length) of the next answer; the rest stays in the buffer."""
        while b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > MAX_HEADER_BYTES:
                raise RuntimeError("answer headers too long")
            self.buffer += self.receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                return status, int(value)
        raise RuntimeError(f"answer without Content-Length: {lines[0]}")

    def read_exactly(self, length):
        while len(self.buffer) < length:
            self.buffer += self.receive()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return body

    def receive(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self):
        self.sock.close()


class RawGrpcClient:
    """Predicts over its own channel (as GrpcClient), sending pre-serialized PredictRequests."""

    def __init__(self, target, model_name, timeout=60):
        self.model_name, self.timeout = model_name, timeout
        self.channel = grpc.insecure_channel(target)
        self.call = self.channel.unary_unary(PREDICT_METHOD)  # bytes in, bytes out
        self.requests = {}  # tuple(jpegs) -> serialized PredictRequest

    def predict(self, jpegs):
        """The PredictResponse; grpc.RpcError for a status other than OK."""
        key = tuple(jpegs)
        if key not in self.requests:
            self.requests[key] = predict_protos.make_predict_request(
                jpegs, self.model_name).SerializeToString()
        response = predict_pb2.PredictResponse.FromString(
            self.call(self.requests[key], timeout=self.timeout))
        rows = [proto.tensor_shape.dim[0].size for proto in response.outputs.values()
                if proto.tensor_shape.dim]
        if not rows or any(n != len(jpegs) for n in rows):
            raise RuntimeError(f"outputs with {rows} rows for {len(jpegs)} images")
        return response

    def close(self):
        self.channel.close()
