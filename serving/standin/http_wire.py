"""HTTP/1.x on the wire for the stand-in's REST endpoint: requests read from a connection's stream, answers' heads.

No sockets here (rest_server.py owns them). read_request returns a connection's next
whole request (a Content-Length or chunked body), or what to answer instead: 413 for a
body over the limit, libevent's HTML page for a head that does not parse.

    .venv/bin/python -c "import io; from serving.standin import http_wire as w; print(w.read_request(io.BytesIO(b'GET /v1/models/m HTTP/1.1\\r\\n\\r\\n'), 99))"
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

    @property
    def expects_continue(self):
        return self.version == "HTTP/1.1" and self.header("expect", "").lower() == "100-continue"


@dataclasses.dataclass
class Request:
    """A complete request: its head and its whole body (b"" when it has none)."""
    head: RequestHead
    body: bytes


@dataclasses.dataclass
class Refused:
    """A request answered without being routed, then the connection closed. error: a
    ServingError (a JSON answer) or None (libevent's HTML page); unread: body bytes to drop."""
    status: int
    error: errors.ServingError = None
    head: RequestHead = None
    unread: int = 0


def read_request(stream, max_body_bytes, go_on=None):
    """The next Request on the stream, a Refused (the connection then closes), or None when
    the stream ends first. go_on(head) is called for an `Expect: 100-continue` whose body
    is within the limit, before the body is read (the caller says "go on" if it must)."""
    head = read_head(stream)
    if not isinstance(head, RequestHead):
        return head  # None or Refused
    is_chunked = "chunked" in head.header("transfer-encoding", "").lower()
    length = head.header("content-length")
    if not is_chunked and length is not None and not length.strip().isdigit():
        return Refused(400, errors.InvalidArgument(
            f"Content-Length must be a number, got {length!r}"), head)
    size = None if is_chunked else int(length or 0)
    if size is not None and size > max_body_bytes:
        return Refused(413, too_large(size, max_body_bytes), head,
                       0 if head.expects_continue else size)
    if head.expects_continue and go_on is not None:
        go_on(head)
    body = read_chunked_body(stream, max_body_bytes) if is_chunked else stream.read(size)
    if isinstance(body, Refused):
        body.head = head
        return body
    if body is None or len(body) < (size or 0):
        return None  # the client closed the connection before its body's end
    return Request(head, body)


def read_line(stream, limit=MAX_LINE_BYTES):
    """The next line without its ending (CRLF or LF); None when the stream ends before the
    line does; a line over the limit comes back longer than the limit, cut."""
    line = stream.readline(limit + 2)
    if not line.endswith(b"\n") and len(line) <= limit:
        return None
    return line.rstrip(b"\n").removesuffix(b"\r")


def read_head(stream):
    """A RequestHead, Refused (see parse_head) or None when the stream ends first. The
    request line is judged as soon as it is whole, before the headers, as libevent does."""
    line = read_line(stream)
    while line == b"":  # RFC 9112 2.2: blank lines before a request line are ignored
        line = read_line(stream)
    if line is None:
        return None
    words = parse_request_line(line.decode("iso-8859-1"))
    if isinstance(words, Refused):
        return words
    lines = []
    while (line := read_line(stream)) != b"":
        if line is None:
            return None
        if len(lines) == MAX_HEADERS:
            return Refused(400)
        lines.append(line.decode("iso-8859-1"))
    return parse_head(words, lines)


def parse_head(words, lines):
    """A RequestHead from the request line's words and the header lines, or libevent's 400."""
    method, target, version = words
    headers = parse_headers(lines)
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
    a line too long, folded, or not "name: value"."""
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


def read_chunked_body(stream, limit):
    """A chunked request's body (RFC 9112 7.1; trailers ignored); Refused when it outgrows the
    limit (413) or does not parse (400); None when the stream ends first."""
    chunks, total = [], 0
    while True:
        line = read_line(stream, MAX_CHUNK_LINE_BYTES)
        if line is None:
            return None
        if len(line) > MAX_CHUNK_LINE_BYTES:
            return malformed_chunks("a chunk-size line is too long")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            return malformed_chunks(f"bad chunk-size line {line[:40]!r}")
        if size == 0:
            break
        total += size
        if total > limit:  # the rest's length is unknown: drop what the discard allows
            return Refused(413, too_large(f"at least {total}", limit), unread=UNKNOWN_LENGTH)
        chunks.append(stream.read(size))
        if read_line(stream, 1) != b"":  # CRLF right after the chunk's data
            return malformed_chunks("a chunk is shorter than its size line says")
    while read_line(stream):  # trailer fields, up to the blank line
        pass
    return b"".join(chunks)


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
