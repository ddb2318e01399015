"""Request errors of the stand-in server, each with TF Serving's HTTP status and gRPC code.

REST answers `{"error": message}` with `http_status` (TF Serving's ToHTTPStatusCode in
model_servers/http_server.cc), gRPC aborts with `grpc_code`.

    .venv/bin/python -c "from serving.standin import errors; print(errors.NotFound('x').http_status)"
"""
import grpc


class ServingError(Exception):
    """A client-visible error; the message is returned to the caller unchanged."""
    http_status = 500
    grpc_code = grpc.StatusCode.INTERNAL

    @property
    def message(self):
        return str(self)

    @property
    def code_name(self):
        """The canonical code's name ("INVALID_ARGUMENT"): the status label of request metrics."""
        return self.grpc_code.name


class InvalidArgument(ServingError):
    """Bad JSON, bad input names or values, undecodable images, unknown labels."""
    http_status = 400
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(ServingError):
    """A request the model cannot take as it is (gRPC's unknown signature, a mixed batch)."""
    http_status = 400
    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class NotFound(ServingError):
    """Unknown model name or version."""
    http_status = 404
    grpc_code = grpc.StatusCode.NOT_FOUND


class PayloadTooLarge(ServingError):
    """A request body over the server's --max_request_bytes (a stand-in limit: HTTP 413)."""
    http_status = 413
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(ServingError):
    """The batching queue is full: the client should retry later."""
    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE


class Unimplemented(ServingError):
    """TF Serving's UNIMPLEMENTED: a JSON value for a dtype it cannot convert (half, complex),
    a MultiInference task of another method."""
    http_status = 501
    grpc_code = grpc.StatusCode.UNIMPLEMENTED
