"""The stand-in's REST transport (TF Serving's http_server.cc): a thread per connection.

Each connection's thread reads its requests (http_wire.py parses them) and answers them
one at a time, in order: a request under /v1/ is counted in the metrics and answered by
rest_routes.py (TF Serving's REST handler), the metrics page and other paths here. As
in TF Serving, the whole body is read before the request is routed; a body over
max_request_bytes gets 413 and is drained, bounded in bytes and time. Methods,
keep-alive and libevent's error pages as TF Serving's: docs/serving.md.

    .venv/bin/python -m serving.standin.server --model_base_path OUT/export/image_classifier
"""
import logging
import selectors
import socket
import socketserver
import threading
import time

from serving.standin import errors, http_wire, metrics as metrics_lib, rest_routes

DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024  # ~10,000 small JPEGs; a 50 MB body is refused
IDLE_SECONDS = 60  # a connection whose client sends nothing this long is closed
# After refusing a large body, read and drop up to this much of it (never keeping it) so
# the client, still sending, sees the 413 instead of a connection reset.
MAX_DISCARD_BYTES = 128 * 1024 * 1024
DISCARD_SECONDS = 5
RECEIVE_BYTES = 256 * 1024  # read at once while dropping a refused body
ACCEPT_POLL_SECONDS = 0.1  # how soon shutdown() is seen by the accepting thread
LOG = logging.getLogger()  # the root logger: REST errors stand among the server's own lines


def handle_request(server, method, path, body):
    """(HTTP status, JSON-able body) for one request under /v1/, counted as TF Serving's REST
    dispatcher counts it: every one by model name and status, an OK one's latency by verb."""
    with metrics_lib.track(server.metrics, "", "", "REST") as record:
        route = rest_routes.route(method, path)
        record.model_name = route.model_name
        if route.action in rest_routes.POST_ACTIONS:
            record.api = route.action
        return 200, rest_routes.process_request(server.core, route, body)


def error_answer(error, method, target):
    """(HTTP status, TF Serving's {"error": ...}) for an exception a request raised; call it
    in the except block (an unexpected one is logged with its traceback)."""
    if isinstance(error, errors.ServingError):
        return error.http_status, {"error": error.message}
    LOG.error("REST %s %s failed", method, target, exc_info=error)
    return 500, {"error": f"Internal error: {type(error).__name__}: {error}"}


def answer_bytes(head, status, body, content_type="application/json", close=False):
    """The whole answer to a request: head (in the request's HTTP version) and body; a HEAD
    request gets the head alone, without Content-Length, as libevent writes it."""
    close = close or head.close_after
    connection = "close" if close else ("keep-alive" if head.version == "HTTP/1.0" else None)
    if head.method == "HEAD":
        return http_wire.answer_head(head.version, status, content_type, None, connection)
    return http_wire.answer_head(head.version, status, content_type, len(body), connection) + body


def json_answer(head, status, answer, close=False):
    return answer_bytes(head, status, rest_routes.encode_json(answer), close=close)


class RestConnection(socketserver.StreamRequestHandler):
    """One client connection, in its own thread: its requests read from the socket and
    answered one at a time, in order."""

    def setup(self):
        super().setup()
        self.connection.settimeout(IDLE_SECONDS)  # a silent client: reads fail, the thread ends
        self.answered = 0  # requests answered on this connection

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.forget(self.connection)

    def handle(self):
        try:
            while self.answer_next():
                pass
        except OSError:  # the client went away, was idle IDLE_SECONDS, or stop() closed it
            pass

    def answer_next(self):
        """Reads the next request and answers it; False when the connection is to close."""
        # Idle only between requests: a client that just connected is sending its first one
        # (its bytes may not be here yet on a loaded machine), and stop() waits for it.
        if self.answered and not self.has_pending_bytes():
            self.server.set_busy(self.connection, False)
            if not self.rfile.peek(1):  # waits for the next request's first bytes
                return False
        self.server.set_busy(self.connection, True)
        event = http_wire.read_request(self.rfile, self.server.max_request_bytes, self.go_on)
        if event is None:
            return False
        if isinstance(event, http_wire.Refused):
            self.refuse(event)
            return False
        data = self.answer(event)
        self.connection.sendall(data)
        self.answered += 1
        head = event.head
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("REST %s %s %s: %s", head.method, head.target, head.version,
                      data[:data.find(b"\r\n")].decode("latin-1"))
        return not head.close_after

    def has_pending_bytes(self):
        """Whether bytes from the client are here already, read or not, without waiting."""
        self.connection.settimeout(0)
        try:
            return bool(self.rfile.peek(1))  # b"" when none has arrived (or at the end)
        finally:
            self.connection.settimeout(IDLE_SECONDS)

    def go_on(self, head):
        """Expect: 100-continue is answered "go on" unless the body has started arriving."""
        if not self.has_pending_bytes():
            self.connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

    def answer(self, request):
        """The answer's bytes: the metrics page, a 404 outside /v1/, else the API's."""
        head, server = request.head, self.server
        path = rest_routes.url_path(head.target)
        if server.prometheus_path is not None and path == server.prometheus_path:
            return answer_bytes(head, 200, server.metrics.render().encode(), "text/plain")
        if not rest_routes.is_api_path(head.target):
            error = errors.NotFound(f"Not found: {head.method} {path} "
                                    "(TF Serving serves /v1/... only)")
            return json_answer(head, 404, {"error": error.message})
        try:
            status, answer = handle_request(server, head.method, head.target, request.body)
        except Exception as e:  # noqa: BLE001 - the request boundary: answer, keep serving
            status, answer = error_answer(e, head.method, head.target)
        head.close_after |= server.is_stopping  # answered during a stop: the connection's last
        return json_answer(head, status, answer)

    def refuse(self, event):
        """An answer before routing (413, a malformed head or body), then its body dropped."""
        head = event.head or http_wire.RequestHead("GET", "", "HTTP/1.1", {}, True)
        if event.error is None:  # libevent's own page: the request never reached the handler
            data = answer_bytes(head, event.status, http_wire.libevent_error_page(event.status),
                                "text/html", close=True)
        else:
            data = json_answer(head, event.status, {"error": event.error.message}, close=True)
        self.connection.sendall(data)
        if event.unread == 0:
            return
        unread = MAX_DISCARD_BYTES if event.unread < 0 else min(event.unread, MAX_DISCARD_BYTES)
        deadline = time.monotonic() + DISCARD_SECONDS
        while unread > 0 and time.monotonic() < deadline:
            self.connection.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.rfile.read1(RECEIVE_BYTES)  # what rfile holds first
            if not data:
                return
            unread -= len(data)


class RestServer(socketserver.ThreadingTCPServer):
    """The listening socket, a thread per connection; stop with shutdown(), server_close()."""

    daemon_threads = False  # server_close() joins them: no model call outlives the server
    allow_reuse_address = True  # as HTTPServer
    request_queue_size = 128

    def __init__(self, address, core, max_request_bytes, metrics=None, prometheus_path=None):
        self.core, self.metrics = core, metrics
        self.max_request_bytes = max_request_bytes
        self.prometheus_path = prometheus_path  # None: no metrics page (monitoring is off)
        self.connections = {}  # socket -> is it busy (a request read or answered)?
        self.is_stopping = False
        self._changed = threading.Condition()
        super().__init__(address, RestConnection)
        self.server_port = self.server_address[1]  # as HTTPServer has it

    def set_busy(self, sock, is_busy):
        with self._changed:
            self.connections[sock] = is_busy
            self._changed.notify_all()

    def process_request(self, request, client_address):
        self.set_busy(request, True)  # busy from its accept: stop() waits for it, thread started or not
        super().process_request(request, client_address)

    def accept_pending(self):
        """Takes connections made before stop() that the accept loop had not taken yet."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            while selector.select(timeout=0):
                self._handle_request_noblock()

    def forget(self, sock):
        with self._changed:
            self.connections.pop(sock, None)
            self._changed.notify_all()

    def shutdown(self, grace_seconds=0):
        """Closes the listening socket (new connections are refused) after taking those made
        before; requests in flight get grace_seconds to be read and answered, then every
        connection is closed. Returns how many requests were still in flight then."""
        self.is_stopping = True
        super().shutdown()
        self.accept_pending()
        self.socket.close()
        with self._changed:
            self._changed.wait_for(lambda: not any(self.connections.values()), grace_seconds)
            sockets, busy = list(self.connections), sum(self.connections.values())
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # its thread's recv() or sendall() ends
            except OSError:
                pass  # already closed by its client
        return busy


def start_rest_server(core, host, port, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
                      metrics=None, prometheus_path=None):
    """Starts serving in a daemon thread; port 0 picks a free port (see server.server_port).
    OSError when the port cannot be bound."""
    server = RestServer((host, port), core, max_request_bytes, metrics, prometheus_path)
    threading.Thread(target=server.serve_forever, args=(ACCEPT_POLL_SECONDS,),
                     name="rest-server", daemon=True).start()
    return server
