"""The stand-in's REST transport (TF Serving's http_server.cc): one asyncio event loop for every connection.

The loop reads and writes every connection (serving/standin/http_wire.py parses
the bytes). Each request under /v1/ goes to a worker thread (Workers), which runs
handle_request: the request counted in the metrics, routed and answered by
serving/standin/rest_routes.py (TF Serving's REST handler); the answer comes back
to the loop to be written. Only the metrics page and paths outside /v1/ are
answered on the loop. One request per connection at a time: pipelined requests
wait in order.

As TF Serving reads it, the whole body is read before the request is routed, so an
error answer never leaves unread bytes behind; over max_request_bytes it is refused
with 413 (Content-Length: before a byte is read), then drained, bounded in bytes and
time. HTTP/1.1 connections stay open; an HTTP/1.0 request gets an HTTP/1.0 answer that
says "Connection: keep-alive" when it asked for that (as `ab -k` does) and closes
otherwise. As under TF Serving's libevent: OPTIONS, HEAD, PUT, DELETE and PATCH reach
the REST handler (HEAD answered with headers only), other methods get libevent's 501
HTML page, and a request line that does not parse (the bytes after a body shorter than
its Content-Length, say) libevent's 400 page, the connection then closed.

    .venv/bin/python -m serving.standin.server --model_base_path OUT/export/image_classifier
"""
import asyncio
import logging
import queue
import socket
import threading

from serving.standin import errors, http_wire, metrics as metrics_lib, rest_routes

DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024  # ~10,000 small JPEGs; a 50 MB body is refused
IDLE_SECONDS = 60  # a connection idle this long between requests is closed
# After refusing a large body, read and drop up to this much of it (never keeping it) so
# the client, still sending, sees the 413 instead of a connection reset.
MAX_DISCARD_BYTES = 128 * 1024 * 1024
DISCARD_SECONDS = 5
# Requests answered at once; with --enable_batching this bounds how many REST requests
# one batch can merge (gRPC's is grpc_server.GRPC_WORKERS).
MAX_WORKERS = 64
PAUSE_READING_BYTES = 1024 * 1024  # pipelined bytes kept while an answer is pending
STOP_GRACE_SECONDS = 1.0  # requests in flight at stop() get this long to be answered
LOG = logging.getLogger()  # the root logger: REST errors stand among the server's own lines


def handle_request(server, method, path, body):
    """(HTTP status, JSON-able body) for one request under /v1/ whose body has been read.

    Each one is counted in request_count by its model name ("" when the URL names none) and
    status, GETs and malformed URLs included, and an OK one's latency is recorded under its
    verb (predict, classify, regress; "" for a GET), as TF Serving's REST dispatcher
    (model_servers/http_server.cc) records them."""
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
    if isinstance(error, RecursionError):  # JSON deep enough to exhaust Python's stack
        return 400, {"error": "JSON Parse error: nested too deeply"}
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


class RestConnection(asyncio.Protocol):
    """One client connection: requests parsed as bytes arrive, answered one at a time."""

    def __init__(self, server):
        self.server = server
        self.loop = server.loop
        self.reader = http_wire.RequestReader(server.max_request_bytes)
        self.transport = None
        self.pending = None  # the head of the request being answered
        self.is_closing = self.is_processing = False
        self.is_reading_paused = self.is_writing_paused = False
        self.discard_left = 0
        self.last_active = self.loop.time()

    def connection_made(self, transport):
        self.transport = transport
        self.server.connections.add(self)
        self.loop.call_later(IDLE_SECONDS, self.close_if_idle)

    def connection_lost(self, exc):
        self.is_closing = True
        self.server.connections.discard(self)

    def data_received(self, data):
        self.last_active = self.loop.time()
        if self.discard_left:
            self.discard(len(data))
        elif not self.is_closing:
            self.reader.feed(data)
            if self.pending is None:
                self.process()
            elif len(self.reader.buffer) > PAUSE_READING_BYTES:
                self.transport.pause_reading()
                self.is_reading_paused = True

    def pause_writing(self):  # the client does not read its answers: stop taking requests
        self.is_writing_paused = True

    def resume_writing(self):
        self.is_writing_paused = False
        self.process()

    def process(self):
        """Answers the buffered requests in order while none is pending."""
        self.is_processing = True
        try:
            while self.pending is None and not self.is_closing and not self.is_writing_paused:
                event = self.reader.next_event()
                if event is None:
                    break
                if isinstance(event, http_wire.ContinueRequested):
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                elif isinstance(event, http_wire.Refused):
                    self.refuse(event)
                else:
                    self.pending = event.head
                    self.respond(event)
        finally:
            self.is_processing = False
        if self.is_reading_paused and self.pending is None and not self.is_closing:
            self.is_reading_paused = False
            self.transport.resume_reading()

    def respond(self, request):
        """Answers the metrics page and paths outside /v1/ on the loop; the API in a worker."""
        head, server = request.head, self.server
        path = rest_routes.url_path(head.target)
        if server.prometheus_path is not None and path == server.prometheus_path:
            return self.finish(answer_bytes(head, 200, server.metrics.render().encode(),
                                            "text/plain"))
        if not rest_routes.is_api_path(head.target):
            error = errors.NotFound(f"Not found: {head.method} {path} "
                                    "(TF Serving serves /v1/... only)")
            return self.finish(json_answer(head, 404, {"error": error.message}))
        server.workers.submit(self.answer_in_worker, request)

    def answer_in_worker(self, request):
        """A worker thread's job: the whole answer, handed back to the loop."""
        head = request.head
        try:
            status, answer = handle_request(self.server, head.method, head.target, request.body)
        except Exception as e:  # noqa: BLE001 - the request boundary: answer, keep serving
            status, answer = error_answer(e, head.method, head.target)
        self.loop.call_soon_threadsafe(self.finish, json_answer(head, status, answer))

    def finish(self, data):
        """Writes the pending request's answer (on the loop), then goes on to the next."""
        head, self.pending = self.pending, None
        if self.is_closing:
            return
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("REST %s %s %s: %s", head.method, head.target, head.version,
                      data[:data.find(b"\r\n")].decode("latin-1"))
        self.transport.write(data)
        if head.close_after:
            self.close()
        elif not self.is_processing:
            self.process()

    def refuse(self, event):
        """An answer before routing (413, a malformed body or head); then the connection
        closes, after reading and dropping the refused body's bytes if it has some."""
        head = event.head or http_wire.RequestHead("GET", "", "HTTP/1.1", {}, True)
        if event.error is None:  # libevent's own page: the request never reached the handler
            data = answer_bytes(head, event.status, http_wire.libevent_error_page(event.status),
                                "text/html", close=True)
        else:
            data = json_answer(head, event.status, {"error": event.error.message}, close=True)
        self.transport.write(data)
        if event.unread == 0:
            return self.close()
        unread = MAX_DISCARD_BYTES if event.unread < 0 else min(event.unread, MAX_DISCARD_BYTES)
        self.discard_left = max(1, unread - len(self.reader.buffer))
        self.reader.buffer.clear()
        self.loop.call_later(DISCARD_SECONDS, self.close)

    def discard(self, count):
        self.discard_left = max(0, self.discard_left - count)
        if not self.discard_left:
            self.close()

    def close(self):
        if not self.is_closing:
            self.is_closing = True
            self.transport.close()  # after what is buffered has been written

    def close_if_idle(self):
        if self.is_closing:
            return
        idle = self.loop.time() - self.last_active
        if self.pending is None and idle >= IDLE_SECONDS:
            return self.close()
        self.loop.call_later(max(1.0, IDLE_SECONDS - idle), self.close_if_idle)


class Workers:
    """Daemon threads for the requests that block, started as needed up to max_workers and
    then reused (daemon: a request stuck in a model call never holds up the process's exit)."""

    def __init__(self, max_workers):
        self.max_workers = max_workers
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._count = self._idle = 0

    def submit(self, function, *args):
        with self._lock:
            is_new = self._jobs.qsize() >= self._idle and self._count < self.max_workers
            if is_new:
                self._count += 1
        self._jobs.put((function, args))
        if is_new:
            threading.Thread(target=self._work, name=f"rest-worker-{self._count}",
                             daemon=True).start()

    def _work(self):
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
            if job is None:
                return
            function, args = job
            function(*args)  # the jobs answer their own errors

    def stop(self):
        for _ in range(self._count):
            self._jobs.put(None)


class RestServer:
    """The listening socket and the event-loop thread; server_port, shutdown() and
    server_close() as the stdlib's servers have them."""

    def __init__(self, sock, core, max_request_bytes, metrics=None, prometheus_path=None):
        self.core, self.metrics = core, metrics
        self.max_request_bytes = max_request_bytes
        self.prometheus_path = prometheus_path  # None: no metrics page (monitoring is off)
        self.workers = Workers(MAX_WORKERS)
        self.connections = set()
        self.server_address = sock.getsockname()[:2]
        self.server_port = self.server_address[1]
        self.loop = asyncio.new_event_loop()
        self._server = self.loop.run_until_complete(
            self.loop.create_server(lambda: RestConnection(self), sock=sock))
        self._thread = threading.Thread(target=self.loop.run_forever, name="rest-server",
                                        daemon=True)
        self._thread.start()

    def shutdown(self):
        """Stops accepting; requests in flight get STOP_GRACE_SECONDS to be answered."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self.loop)
            self._thread.join(STOP_GRACE_SECONDS + 5)

    async def _stop(self):
        self._server.close()
        deadline = self.loop.time() + STOP_GRACE_SECONDS
        while (any(c.pending is not None for c in self.connections)
               and self.loop.time() < deadline):
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.transport.abort()
        self.loop.stop()

    def server_close(self):
        self.workers.stop()
        if not self._thread.is_alive():
            self.loop.close()


def start_rest_server(core, host, port, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
                      metrics=None, prometheus_path=None):
    """Starts serving in a daemon thread; port 0 picks a free port (see server.server_port).
    OSError when the port cannot be bound."""
    sock = socket.create_server((host, port), backlog=128)  # SO_REUSEADDR, as HTTPServer
    try:
        return RestServer(sock, core, max_request_bytes, metrics, prometheus_path)
    except BaseException:
        sock.close()
        raise
