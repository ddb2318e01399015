"""HTTP/1.x on the wire for the stand-in's REST endpoint: requests parsed from bytes as they arrive, answers' heads.

No sockets here (serving/standin/rest_server.py owns them). RequestReader takes
the bytes of one connection as they come and hands back complete requests in
order, with the events a server must act on before a body is complete: an
`Expect: 100-continue` to answer, a body over the limit (413), a request line or
headers that do not parse (libevent's HTML error page, as TF Serving's HTTP
server sends it). Bodies come with Content-Length or chunked (RFC 9112); no
length and not chunked means no body.

    .venv/bin/python -c "from serving.standin import http_wire as w; r = w.RequestReader(99); r.feed(b'GET /v1/models/m HTTP/1.1\\r\\n\\r\\n'); print(r.next_event())"
"""
import dataclasses
import email.utils
import http
import sys

from serving.standin import errors

MAX_LINE_BYTES = 65536  # the stdlib's limit for a request or header line (http.server)
MAX_HEADERS = 100
MAX_CHUNK_LINE_BYTES = 1024  # a chunk-size line: hex digits and optional extensions
UNKNOWN_LENGTH = -1  # Refused.unread of a chunked body refused before its end
# The methods TF Serving's libevent passes to its REST handler; others get its 501 page.
HANDLED_METHODS = frozenset(("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"))
SERVER_HEADER = f"tf-serving-standin Python/{sys.version.split()[0]}"
# libevent's ERR_FORMAT (http.c), the body of evhttp_send_error's answers.
LIBEVENT_ERROR_PAGE = ("<HTML><HEAD>\n<TITLE>{code} {reason}</TITLE>\n</HEAD><BODY>\n"
                       "<H1>{reason}</H1>\n</BODY></HTML>\n")


@dataclasses.dataclass
class RequestHead:
    method: str
    target: str
    version: str  # "HTTP/1.0" or "HTTP/1.1"
    headers: dict  # lower-case name -> value; repeated names joined with ", "
    close_after: bool  # the connection closes after the answer

    def header(self, name, default=None):
        return self.headers.get(name, default)


@dataclasses.dataclass
class Request:
    """A complete request: its head and its whole body (b"" when it has none)."""
    head: RequestHead
    body: bytes


@dataclasses.dataclass
class ContinueRequested:
    """Expect: 100-continue on a body that is within the limit: say "go on" first."""
    version: str


@dataclasses.dataclass
class Refused:
    """A request answered without being routed; the connection closes after the answer.

    error: a ServingError (a JSON answer, as TF Serving's handler sends) or None with
    status (libevent's own HTML page); unread: body bytes to read and drop first."""
    status: int
    error: errors.ServingError = None
    head: RequestHead = None
    unread: int = 0


class RequestReader:
    """The requests of one connection, from its bytes (feed) to events (next_event)."""

    def __init__(self, max_body_bytes):
        self.max_body_bytes = max_body_bytes
        self.buffer = bytearray()
        self._head = None  # the head whose body is still arriving
        self._body_length = None  # its Content-Length, or None for chunked

    def feed(self, data):
        self.buffer += data

    def next_event(self):
        """The next Request, ContinueRequested or Refused; None until more bytes arrive.
        After a Refused the reader is spent: the connection closes."""
        if self._head is None:
            head = self._take_head()
            if not isinstance(head, RequestHead):
                return head  # None or Refused
            event = self._start_body(head)
            if event is not None:
                return event
        return self._take_body()

    def _take_head(self):
        while self.buffer[:2] == b"\r\n" or self.buffer[:1] == b"\n":  # RFC 9112 2.2
            del self.buffer[:2 if self.buffer[:1] == b"\r" else 1]
        end, separator = find_head_end(self.buffer)
        if end < 0:
            line_end = self.buffer.find(b"\n")
            if line_end >= 0:  # the request line is judged when it is whole, as libevent does
                line = bytes(self.buffer[:line_end]).decode("iso-8859-1").rstrip("\r")
                refused = parse_request_line(line)
                if isinstance(refused, Refused):
                    return refused
            if len(self.buffer) > MAX_LINE_BYTES * (MAX_HEADERS + 1):
                return Refused(400)
            if self.buffer.find(b"\n") < 0 and len(self.buffer) > MAX_LINE_BYTES:
                return Refused(414)
            return None
        text = self.buffer[:end].decode("iso-8859-1")
        del self.buffer[:end + separator]
        lines = text.split("\r\n") if separator == 4 and "\n" not in text.replace("\r\n", "") \
            else [line.rstrip("\r") for line in text.split("\n")]
        return parse_head(lines)

    def _start_body(self, head):
        """Sets up reading the body; an event when one comes before it, else None."""
        is_chunked = "chunked" in head.header("transfer-encoding", "").lower()
        length = head.header("content-length")
        if not is_chunked and length is not None and not length.strip().isdigit():
            return Refused(400, errors.InvalidArgument(
                f"Content-Length must be a number, got {length!r}"), head)
        size = None if is_chunked else int(length or 0)
        if size is not None and size > self.max_body_bytes:
            expects = self._expects_continue(head)
            return Refused(413, too_large(size, self.max_body_bytes), head,
                           0 if expects else size)
        self._head, self._body_length = head, size
        if self._expects_continue(head) and not self.buffer:
            return ContinueRequested(head.version)
        return None

    @staticmethod
    def _expects_continue(head):
        return (head.version == "HTTP/1.1"
                and head.header("expect", "").lower() == "100-continue")

    def _take_body(self):
        if self._body_length is None:
            taken = take_chunked_body(self.buffer, self.max_body_bytes)
            if isinstance(taken, Refused):
                taken.head = self._head
                return taken
            if taken is None:
                return None
            body, used = taken
        else:
            if len(self.buffer) < self._body_length:
                return None
            body, used = bytes(self.buffer[:self._body_length]), self._body_length
        del self.buffer[:used]
        request, self._head = Request(self._head, body), None
        return request


def find_head_end(buffer):
    """(index of the blank line ending the head, the length of that separator) or (-1, 0)."""
    crlf = buffer.find(b"\r\n\r\n")
    lf = buffer.find(b"\n\n", 0, crlf + 2 if crlf >= 0 else len(buffer))  # never the body
    if lf >= 0 and (crlf < 0 or lf < crlf + 1):
        return lf, 2
    return (crlf, 4) if crlf >= 0 else (-1, 0)


def parse_head(lines):
    """A RequestHead from the head's lines (text, request line first), or Refused: libevent's 400
    for a request line or headers it cannot parse, 414 for a line too long, 501 for a method
    it does not pass on."""
    words = parse_request_line(lines[0])
    if isinstance(words, Refused):
        return words
    method, target, version = words
    headers = parse_headers(lines[1:])
    if headers is None:
        return Refused(400)
    connection = headers.get("connection", "").lower()
    close_after = (connection == "close" if version == "HTTP/1.1"
                   else connection != "keep-alive")
    return RequestHead(method, target, version, headers, close_after)


def parse_request_line(line):
    """(method, target, version), or Refused: 414 for a line too long, 400 for one that does
    not parse, 501 for a method libevent does not pass on."""
    if len(line) > MAX_LINE_BYTES:
        return Refused(414)
    words = line.split(" ")
    if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1") or not words[1]:
        return Refused(400)
    if words[0] not in HANDLED_METHODS:
        return Refused(501)
    return tuple(words)


def parse_headers(lines):
    """{lower-case name: value}, repeated names joined with ", " (RFC 9110 5.3); None for
    more than MAX_HEADERS lines, a line too long, folded, or not "name: value"."""
    if len(lines) > MAX_HEADERS:
        return None
    headers = {}
    for line in lines:
        if len(line) > MAX_LINE_BYTES or line[:1] in (" ", "\t"):
            return None
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            return None
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def take_chunked_body(buffer, limit):
    """(body, bytes used) once a whole chunked body (RFC 9112 7.1) is in the buffer, None
    before; Refused when it outgrows the limit (413) or does not parse (400)."""
    spans, total, position = [], 0, 0  # copied once the body is whole: bodies come in pieces
    while True:
        line_end = buffer.find(b"\n", position)
        if line_end < 0:
            return None if len(buffer) - position <= MAX_CHUNK_LINE_BYTES else malformed_chunks(
                "a chunk-size line is too long")
        line = bytes(buffer[position:line_end])
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            return malformed_chunks(f"bad chunk-size line {line[:40]!r}")
        position = line_end + 1
        if size == 0:
            return take_trailer(buffer, position, spans)
        total += size
        if total > limit:  # the rest's length is unknown: drop what the discard allows
            return Refused(413, too_large(f"at least {total}", limit), unread=UNKNOWN_LENGTH)
        if len(buffer) < position + size + 2:
            return None
        spans.append((position, position + size))
        position += size
        ending = buffer.find(b"\n", position, position + 3)
        if ending < 0 or buffer[position:ending].strip():
            return malformed_chunks("a chunk is shorter than its size line says")
        position = ending + 1


def take_trailer(buffer, position, spans):
    """(body of the chunks' spans, bytes used) after the trailer fields (read and ignored),
    or None before."""
    while True:
        line_end = buffer.find(b"\n", position)
        if line_end < 0:
            return None
        is_blank = not buffer[position:line_end].strip()
        position = line_end + 1
        if is_blank:
            view = memoryview(buffer)
            try:
                return b"".join(view[start:end] for start, end in spans), position
            finally:
                view.release()  # the buffer is resized next; a live view would forbid it


def malformed_chunks(why):
    return Refused(400, errors.InvalidArgument(f"Malformed chunked request body: {why}"))


def too_large(length, limit):
    return errors.PayloadTooLarge(f"Request body of {length} bytes exceeds the limit of "
                                  f"{limit} bytes (--max_request_bytes)")


def answer_head(version, status, content_type, body_length, connection):
    """An answer's status line and headers. body_length None: no Content-Length (a HEAD
    answer, as libevent writes it); connection: "close", "keep-alive" or None (no header)."""
    lines = [f"{version} {status} {http.HTTPStatus(status).phrase}", f"Server: {SERVER_HEADER}",
             f"Date: {email.utils.formatdate(usegmt=True)}", f"Content-Type: {content_type}"]
    lines += [f"Connection: {connection}"] * (connection is not None)
    lines += [f"Content-Length: {body_length}"] * (body_length is not None)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def libevent_error_page(status):
    """The HTML body of libevent's evhttp_send_error for a status."""
    reason = http.HTTPStatus(status).phrase
    return LIBEVENT_ERROR_PAGE.format(code=status, reason=reason).encode()
