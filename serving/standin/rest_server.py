"""The stand-in's REST endpoint: a threaded stdlib HTTP server in front of serving/standin/rest_routes.py.

One thread per connection; model calls release the GIL, so concurrent requests
overlap. The whole body is read before the request is routed, as TF Serving reads
it, so an error answer never leaves unread bytes behind (a client still sending
would see a reset instead of the answer). Bodies may come with Content-Length or
chunked; over max_request_bytes they are refused with 413 (Content-Length: before a
byte is read), then drained, bounded in bytes and time. HTTP/1.1 connections stay
open; an HTTP/1.0 request gets an HTTP/1.0 answer that says "Connection:
keep-alive" when it asked for that (as `ab -k` does) and closes otherwise.

As under TF Serving's libevent: OPTIONS, HEAD, PUT, DELETE and PATCH reach the REST
handler (HEAD answered with headers only), TRACE and CONNECT get libevent's 501 HTML
page, and a request line that does not parse (the bytes after a body shorter than its
Content-Length, say) libevent's 400 page, the connection then closed. With batching
a :predict is answered by the batch thread as soon as its batch is done (EarlyWriter).

    .venv/bin/python -m serving.standin.server --model_base_path OUT/export/image_classifier
"""
import email.utils
import functools
import http.server
import logging
import os
import socket
import threading
import time

from serving.standin import errors, metrics as metrics_lib, rest_routes

DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024  # ~10,000 small JPEGs; a 50 MB body is refused
SOCKET_TIMEOUT_SECONDS = 60  # an idle or stalled client frees its thread after this
# After refusing a large body, read and drop up to this much of it (never keeping it) so
# the client, still sending, sees the 413 instead of a connection reset.
MAX_DISCARD_BYTES = 128 * 1024 * 1024
DISCARD_SECONDS = 5
MAX_CHUNK_LINE_BYTES = 1024  # a chunk-size line: hex digits and optional extensions
LOG = logging.getLogger()  # the root logger, as BaseHTTPRequestHandler's log lines went there
# libevent's ERR_FORMAT (http.c), the body of evhttp_send_error's answers.
LIBEVENT_ERROR_PAGE = ("<HTML><HEAD>\n<TITLE>{code} {reason}</TITLE>\n</HEAD><BODY>\n"
                       "<H1>{reason}</H1>\n</BODY></HTML>\n")


def handle_request(server, method, path, body, write_early=None):
    """(HTTP status, JSON-able body) for one request under /v1/ whose body has been read;
    the body is None when write_early(answer) already answered a batched :predict.

    Each one is counted in request_count by its model name ("" when the URL names none) and
    status, GETs and malformed URLs included, and an OK one's latency is recorded under its
    verb (predict, classify, regress; "" for a GET), as TF Serving's REST dispatcher
    (model_servers/http_server.cc) records them."""
    with metrics_lib.track(server.metrics, "", "", "REST") as record:
        route = rest_routes.route(method, path)
        record.model_name = route.model_name
        if route.action in rest_routes.POST_ACTIONS:
            record.api = route.action
        return 200, answer(server.core, route, body, write_early)


def answer(core, route, body, write_early=None):
    """The JSON-able answer to a routed request."""
    if route.action == "status":  # labels are ignored, as TF Serving ignores them here
        return rest_routes.format_status(core.get_status(route.model_name, route.version))
    if route.action == "metadata":
        served = core.get(route.model_name, route.version, route.label)
        return rest_routes.format_metadata(served.model_name, served.version,
                                           served.signature_defs)
    if route.action == "predict":
        return predict(core, route, body, write_early)
    return rest_routes.classify_or_regress(core, route, body)


def predict(core, route, body, write_early=None):
    """The :predict answer: JSON parsed first, then the model resolved, as TF Serving does.
    With batching and write_early, the batch thread formats and writes the answer as soon as
    the batch is done (None is returned then): the clients of a batch get their answers
    together, not one by one as their threads wake, so the next batch's requests come sooner."""
    signature_name, is_row, payload = rest_routes.parse_predict_body(body)
    served = core.get(route.model_name, route.version, route.label)
    name, signature_def = served.resolve_signature(signature_name)
    inputs = rest_routes.extract_inputs(is_row, payload, signature_def.inputs)
    if write_early is None or served.scheduler is None:
        return rest_routes.format_predictions(served.predict(name, inputs), is_row)
    outputs = served.predict(name, inputs, on_outputs=lambda rows: write_early(
        rest_routes.format_predictions(rows, is_row)))
    return None if write_early.is_done() else rest_routes.format_predictions(outputs, is_row)


class RestHandler(http.server.BaseHTTPRequestHandler):
    """Maps HTTP onto handle_request; every error becomes TF Serving's {"error": ...}."""
    protocol_version = "HTTP/1.1"
    server_version = "tf-serving-standin"
    timeout = SOCKET_TIMEOUT_SECONDS

    def setup(self):
        super().setup()
        # Headers and body go out in two writes; without NODELAY, Nagle's algorithm holds
        # the body until the client's delayed ACK (~40 ms per request on Linux).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def parse_request(self):
        """The stdlib's parse_request, with a plain header reader for well-formed HTTP/1.x
        requests: the stdlib's email-package parser costs ~30 us per request, a tenth of what
        a batched prediction costs the server. Anything unusual takes the stdlib's path."""
        words = self.raw_requestline.decode("iso-8859-1").rstrip("\r\n").split(" ")
        if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
            return super().parse_request()
        self.command, self.path, self.request_version = words
        self.requestline = " ".join(words)
        try:
            self.headers = read_headers(self.rfile)
        except ValueError as e:
            self.close_connection = True
            self.send_error(400, f"Bad request headers: {e}")
            return False
        connection = self.headers.get("Connection", "").lower()
        self.close_connection = (connection == "close" if self.request_version == "HTTP/1.1"
                                 else connection != "keep-alive")
        if (self.headers.get("Expect", "").lower() == "100-continue"
                and self.request_version == "HTTP/1.1"):
            return self.handle_expect_100()
        return True

    def do_GET(self):
        self.respond_to("GET")

    def do_POST(self):
        self.respond_to("POST")

    def do_PUT(self):  # the rest get TF Serving's JSON 400, not the stdlib's HTML 501
        self.respond_to("PUT")

    def do_DELETE(self):
        self.respond_to("DELETE")

    def do_PATCH(self):
        self.respond_to("PATCH")

    def do_OPTIONS(self):  # TF Serving's libevent lets OPTIONS and HEAD through to the handler
        self.respond_to("OPTIONS")

    def do_HEAD(self):
        self.respond_to("HEAD")

    def respond_to(self, method):
        self.unread_body_bytes = 0
        self.early_rest = None  # bytes of an early answer the batch thread could not send
        try:
            body = self.read_body()
            if self.is_metrics_request():
                return self.send_body(200, self.server.metrics.render().encode(), "text/plain")
            status, answer = self.dispatch(method, body)
        except errors.ServingError as e:
            status, answer = e.http_status, {"error": e.message}
        except RecursionError:  # JSON deep enough to exhaust Python's stack in conversion
            status, answer = 400, {"error": "JSON Parse error: nested too deeply"}
        except Exception as e:  # the request boundary: log it, answer 500, keep serving
            logging.exception("REST %s %s failed", method, self.path)
            status, answer = 500, {"error": f"Internal error: {type(e).__name__}: {e}"}
        if self.early_rest is not None:  # answered by the batch thread (write_early)
            if self.early_rest:
                self.connection.sendall(self.early_rest)
        elif method == "HEAD":  # libevent answers HEAD with the handler's headers, no body
            self.send_head(status, "application/json")
        else:
            self.send_body(status, rest_routes.encode_json(answer), "application/json")
        if self.unread_body_bytes:
            self.discard_body(self.unread_body_bytes)

    def dispatch(self, method, body):
        """TF Serving's API under /v1/ (any case); other paths are not found."""
        if not rest_routes.is_api_path(self.path):
            raise errors.NotFound(f"Not found: {method} {rest_routes.url_path(self.path)} "
                                  "(TF Serving serves /v1/... only)")
        return handle_request(self.server, method, self.path, body, EarlyWriter(self))

    def is_metrics_request(self):
        path = self.server.prometheus_path
        return path is not None and rest_routes.url_path(self.path) == path

    def handle_expect_100(self):
        """Refuses a too-large body before the client sends it (curl sends Expect: 100-continue)."""
        length = self.headers.get("Content-Length", "")
        limit = self.server.max_request_bytes
        if length.strip().isdigit() and int(length) > limit:
            self.close_connection = True
            error = too_large(int(length), limit)
            self.send_body(413, rest_routes.encode_json({"error": error.message}),
                           "application/json")
            return False
        return super().handle_expect_100()

    def read_body(self):
        """The request body: Content-Length bytes, the chunks of a chunked body, or b""."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked_body()
        length = self.headers.get("Content-Length")
        if length is None:
            return b""  # RFC 9112: no length and not chunked means no body
        if not length.strip().isdigit():
            self.close_connection = True  # where the next request starts is unknown
            raise errors.InvalidArgument(f"Content-Length must be a number, got {length!r}")
        limit = self.server.max_request_bytes
        if int(length) > limit:
            self.close_connection = True  # the unread body must not be parsed as a request
            self.unread_body_bytes = int(length)
            raise too_large(int(length), limit)
        return self.rfile.read(int(length))

    def read_chunked_body(self):
        """A chunked body (RFC 9112 section 7.1), refused with 413 once it outgrows the limit."""
        chunks, total, limit = [], 0, self.server.max_request_bytes
        while True:
            size = self.read_chunk_size()
            if size == 0:
                break
            total += size
            if total > limit:
                self.close_connection = True
                self.unread_body_bytes = MAX_DISCARD_BYTES  # the rest's length is unknown
                raise too_large(f"at least {total}", limit)
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(3).strip():
                raise self.malformed_chunks("a chunk is shorter than its size line says")
            chunks.append(chunk)
        while self.rfile.readline(65537).strip():  # trailer fields: read and ignored
            pass
        return b"".join(chunks)

    def read_chunk_size(self):
        line = self.rfile.readline(MAX_CHUNK_LINE_BYTES + 1)
        try:
            return int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise self.malformed_chunks(f"bad chunk-size line {line[:40]!r}") from None

    def malformed_chunks(self, why):
        self.close_connection = True
        return errors.InvalidArgument(f"Malformed chunked request body: {why}")

    def discard_body(self, length):
        """Reads and drops a refused body in chunks, bounded in bytes and time."""
        self.wfile.flush()
        self.connection.settimeout(DISCARD_SECONDS)
        remaining = min(length, MAX_DISCARD_BYTES)
        try:
            while remaining > 0:
                chunk = self.rfile.read1(min(remaining, 1 << 16))
                if not chunk:
                    break
                remaining -= len(chunk)
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:  # timeout or reset: the client gave up, nothing left to do
            pass

    def send_response_only(self, code, message=None):
        """The status line in the request's HTTP version: an HTTP/1.0 client gets HTTP/1.0
        (TF Serving's libevent does the same; some 1.0 clients insist)."""
        version = "HTTP/1.0" if self.request_version == "HTTP/1.0" else self.protocol_version
        message = message if message is not None else self.responses.get(code, ("",))[0]
        if not hasattr(self, "_headers_buffer"):
            self._headers_buffer = []
        self._headers_buffer.append(f"{version} {code} {message}\r\n".encode("latin-1", "strict"))

    def send_body(self, status, data, content_type):
        """Status line, headers and body in one write (one system call, one TCP segment):
        the headers send_response and send_header would write, built as one string."""
        head = self.response_head(status, content_type, f"Content-Length: {len(data)}\r\n")
        self.write_all(head + data)

    def send_head(self, status, content_type):
        """A HEAD answer: the headers without a body, and without Content-Length, as
        libevent writes them (evhttp_response_needs_body is false for HEAD)."""
        self.write_all(self.response_head(status, content_type, ""))

    def response_head(self, status, content_type, length_line):
        if LOG.isEnabledFor(logging.DEBUG):
            self.log_request(status)
        version = "HTTP/1.0" if self.request_version == "HTTP/1.0" else self.protocol_version
        if self.close_connection:
            connection = "Connection: close\r\n"
        elif self.request_version == "HTTP/1.0":  # it asked for keep-alive: say it is kept
            connection = "Connection: keep-alive\r\n"
        else:
            connection = ""
        return (f"{version} {status} {self.responses.get(status, ('',))[0]}\r\n"
                f"Server: {self.version_string()}\r\nDate: {http_date()}\r\n"
                f"Content-Type: {content_type}\r\n{length_line}{connection}\r\n"
                ).encode("latin-1")

    def send_error(self, code, message=None, explain=None):
        """libevent's own error page (evhttp_send_error), which TF Serving's HTTP server sends
        for a request line it cannot parse (400) or a method it does not allow (TRACE,
        CONNECT: 501): HTML naming only the status, and the connection closed. Bytes after a
        body shorter than its Content-Length says arrive here as the next request line."""
        self.close_connection = True
        reason = self.responses.get(code, ("",))[0]
        LOG.debug("REST %s: %d %s", message or "", code, reason)
        self.send_body(code, LIBEVENT_ERROR_PAGE.format(code=code, reason=reason).encode(),
                       "text/html")

    def write_all(self, data):
        """sendall without its poll() first (a socket with a timeout polls before each send):
        one system call, one release of the GIL, for an answer the send buffer takes whole;
        the rest, if any, goes out with sendall and the timeout."""
        try:
            sent = os.write(self.connection.fileno(), data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self.connection.sendall(memoryview(data)[sent:])

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        LOG.debug("REST %s " + format, self.address_string(), *args)


class EarlyWriter:
    """write_early for one request: called by the batch thread with the 200 answer, it writes
    what the socket takes at once (the socket never blocks that thread: it has a timeout, so
    it is non-blocking underneath) and leaves the rest, if any, to the request's thread."""
    __slots__ = ("handler",)

    def __init__(self, handler):
        self.handler = handler

    def __call__(self, answer):
        handler = self.handler
        body = rest_routes.encode_json(answer)
        data = handler.response_head(200, "application/json", f"Content-Length: {len(body)}\r\n")
        data += body
        try:
            sent = os.write(handler.connection.fileno(), data)
        except BlockingIOError:
            sent = 0
        except OSError:  # the client is gone; its thread finds out at its next read
            sent = len(data)
        handler.early_rest = data[sent:]

    def is_done(self):
        return self.handler.early_rest is not None


class Headers(dict):
    """Request headers by lower-case name; get() takes any case, like email.message.Message."""

    def get(self, name, default=None):
        return super().get(name.lower(), default)

    def __getitem__(self, name):
        return self.get(name)


def read_headers(rfile, max_headers=100):
    """Header lines up to the blank line; repeated names joined with ", " (RFC 9110 5.3)."""
    headers = Headers()
    for _ in range(max_headers + 1):
        line = rfile.readline(65537)
        if line in (b"\r\n", b"\n", b""):
            return headers
        if len(line) > 65536 or line[:1] in (b" ", b"\t"):
            raise ValueError("header line too long or folded")
        name, colon, value = line.decode("iso-8859-1").partition(":")
        if not colon or not name.strip():
            raise ValueError(f"not a header line: {line[:40]!r}")
        key, value = name.strip().lower(), value.strip()
        dict.__setitem__(headers, key, f"{headers[key]}, {value}" if key in headers else value)
    raise ValueError(f"more than {max_headers} header lines")


def http_date():
    """The Date header's text (RFC 9110), formatted once per second."""
    return http_date_of(int(time.time()))


@functools.lru_cache(maxsize=1)
def http_date_of(second):
    return email.utils.formatdate(second, usegmt=True)


def too_large(length, limit):
    return errors.PayloadTooLarge(f"Request body of {length} bytes exceeds the limit of "
                                  f"{limit} bytes (--max_request_bytes)")


class RestServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # concurrent clients connecting at once are queued, not refused

    def __init__(self, address, core, max_request_bytes, metrics=None, prometheus_path=None):
        super().__init__(address, RestHandler)
        self.core, self.metrics = core, metrics
        self.max_request_bytes = max_request_bytes
        self.prometheus_path = prometheus_path  # None: no metrics page (monitoring is off)


def start_rest_server(core, host, port, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
                      metrics=None, prometheus_path=None):
    """Starts serving in a daemon thread; port 0 picks a free port (see server.server_port)."""
    server = RestServer((host, port), core, max_request_bytes, metrics, prometheus_path)
    thread = threading.Thread(target=server.serve_forever, name="rest-server", daemon=True)
    thread.start()
    return server
