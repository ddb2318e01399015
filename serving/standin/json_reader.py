"""A request body read as TF Serving's rapidjson reads it (util/json_tensor.cc ParseJson).

A body that does not parse is answered in rapidjson's words and byte offset (`JSON Parse
error: Invalid value. at offset: 0`: clients match on it), and what rapidjson accepts is
accepted: bytes that are not UTF-8 inside a string (kept as surrogate escapes;
to_bytes() restores them), a UTF-8 byte-order mark, Inf/-Inf/-NaN, a NUL byte ending
the document; UTF-16/32 bodies are refused. Python's json reads the common body; one it
refuses, or one with a \\uD800-\\uDFFF escape or a number too big for a double, is read
again here byte by byte. A repeated key keeps its last value (rapidjson: the first).

    .venv/bin/python -c "from serving.standin import json_reader as j; print(j.loads(b'[1, -Inf, NaN]'))"
"""
import json
import math
import re

# rapidjson's GetParseError_En texts (include/rapidjson/error/en.h), by ParseErrorCode.
DOCUMENT_EMPTY = "The document is empty."
ROOT_NOT_SINGULAR = "The document root must not be followed by other values."
VALUE_INVALID = "Invalid value."
OBJECT_MISS_NAME = "Missing a name for object member."
OBJECT_MISS_COLON = "Missing a colon after a name of object member."
OBJECT_MISS_COMMA = "Missing a comma or '}' after an object member."
ARRAY_MISS_COMMA = "Missing a comma or ']' after an array element."
UNICODE_ESCAPE_INVALID_HEX = "Incorrect hex digit after \\u escape in string."
SURROGATE_INVALID = "The surrogate pair in string is invalid."
ESCAPE_INVALID = "Invalid escape character in string."
MISS_QUOTATION_MARK = "Missing a closing quotation mark in string."
INVALID_ENCODING = "Invalid encoding in string."
NUMBER_TOO_BIG = "Number too big to be stored in double."
NUMBER_MISS_FRACTION = "Miss fraction part in number."
NUMBER_MISS_EXPONENT = "Miss exponent in number."

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # Python decodes these differently
_WHITESPACE = re.compile(rb"[ \t\n\r]*")  # rapidjson's SkipWhitespace set, as JSON's
_STRING_RUN = re.compile(rb'[^"\\\x00-\x1f]*')  # bytes copied as they are
_DIGITS = re.compile(rb"[0-9]*")
_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b",
            ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
_BOM = b"\xef\xbb\xbf"
INT64_MIN, UINT64_MAX = -2 ** 63, 2 ** 64 - 1
MAX_DECIMAL_EXPONENT = 308  # rapidjson refuses a positive exponent past this


class JsonParseError(ValueError):
    """A body rapidjson would not parse: its words and the byte offset it stopped at."""

    def __init__(self, words, offset):
        super().__init__(f"{words} at offset: {offset}")
        self.words, self.offset = words, offset


class _TooBig(Exception):
    """A float literal past the double range: Python's json reads it as inf."""


def _checked_float(text):
    """float(text), or _TooBig where rapidjson refuses it: past the double range, or a
    positive exponent past 308 (plus the fraction's digits) even on a zero ("0e400")."""
    value = float(text)
    if math.isinf(value) or (("e" in text or "E" in text) and is_exponent_too_big(text)):
        raise _TooBig(text)
    return value


def is_exponent_too_big(text):
    mantissa, _, exponent = text.lower().partition("e")
    fraction_digits = len(mantissa.partition(".")[2])
    return not exponent.startswith("-") and int(exponent) > MAX_DECIMAL_EXPONENT + fraction_digits


_DECODER = json.JSONDecoder(parse_float=_checked_float)  # made once: json.loads(..., kw) makes one a call


def loads(body):
    """The JSON value of body (bytes), as rapidjson reads it; JsonParseError otherwise."""
    if _SURROGATE_ESCAPE.search(body) is None:
        try:
            return _DECODER.decode(body.decode("utf-8", "surrogateescape"))
        except (json.JSONDecodeError, _TooBig):
            pass  # read again below, for rapidjson's words and offset (or its acceptance)
    return Reader(body).read_document()


def to_bytes(text):
    """The bytes of a string read by loads(), bytes that are not UTF-8 included."""
    return text.encode("utf-8", "surrogateescape")


class Reader:
    """rapidjson's GenericReader over a MemoryStream, in Python: the same acceptance, the same
    error and the same offset (MemoryStream::Tell, from the first byte of the body)."""

    def __init__(self, data):
        self.data, self.pos = data, 0
        for byte in _BOM:  # EncodedInputStream<UTF8<>, MemoryStream> skips each BOM byte
            if self.peek() == byte:
                self.pos += 1

    def peek(self):
        """The next byte, 0 at the end (MemoryStream::Peek): a NUL byte ends the document."""
        return self.data[self.pos] if self.pos < len(self.data) else 0

    def consume(self, char):
        if self.peek() == ord(char):
            self.pos += 1
            return True
        return False

    def fail(self, words, offset=None):
        raise JsonParseError(words, self.pos if offset is None else offset)

    def skip_whitespace(self):
        self.pos = _WHITESPACE.match(self.data, self.pos).end()

    def read_document(self):
        self.skip_whitespace()
        if self.peek() == 0:
            self.fail(DOCUMENT_EMPTY)
        value = self.read_value()
        self.skip_whitespace()
        if self.peek() != 0:
            self.fail(ROOT_NOT_SINGULAR)
        return value

    def read_value(self):
        char = chr(self.peek())
        if char in "ntf":
            return self.read_literal({"n": ("null", None), "t": ("true", True),
                                      "f": ("false", False)}[char])
        if char == '"':
            return self.read_string()
        if char == "{":
            return self.read_object()
        if char == "[":
            return self.read_array()
        return self.read_number()

    def read_literal(self, word_and_value):
        word, value = word_and_value
        self.pos += 1
        for char in word[1:]:
            if not self.consume(char):
                self.fail(VALUE_INVALID)
        return value

    def read_object(self):
        self.pos += 1
        self.skip_whitespace()
        members = {}
        if self.consume("}"):
            return members
        while True:
            if self.peek() != ord('"'):
                self.fail(OBJECT_MISS_NAME)
            name = self.read_string()
            self.skip_whitespace()
            if not self.consume(":"):
                self.fail(OBJECT_MISS_COLON)
            self.skip_whitespace()
            members[name] = self.read_value()  # the last of a repeated name, as Python's json
            self.skip_whitespace()
            if self.consume(","):
                self.skip_whitespace()
            elif self.consume("}"):
                return members
            else:
                self.fail(OBJECT_MISS_COMMA)

    def read_array(self):
        self.pos += 1
        self.skip_whitespace()
        items = []
        if self.consume("]"):
            return items
        while True:
            items.append(self.read_value())
            self.skip_whitespace()
            if self.consume(","):
                self.skip_whitespace()
            elif self.consume("]"):
                return items
            else:
                self.fail(ARRAY_MISS_COMMA)

    def read_string(self):
        """A string's bytes, copied unchecked as rapidjson copies them, as str (non-UTF-8
        bytes as surrogate escapes)."""
        self.pos += 1
        out = bytearray()
        while True:
            run = _STRING_RUN.match(self.data, self.pos)
            out += run.group()
            self.pos = run.end()
            byte = self.peek()
            if byte == ord('"'):
                self.pos += 1
                return bytes(out).decode("utf-8", "surrogateescape")
            if byte == ord("\\"):
                out += self.read_escape()
            elif byte == 0:
                self.fail(MISS_QUOTATION_MARK)
            else:  # a control character below 0x20
                self.fail(INVALID_ENCODING)

    def read_escape(self):
        escape_offset = self.pos  # rapidjson reports the backslash for a bad escape
        self.pos += 1
        byte = self.peek()
        if byte in _ESCAPES:
            self.pos += 1
            return _ESCAPES[byte]
        if byte != ord("u"):
            self.fail(ESCAPE_INVALID, escape_offset)
        self.pos += 1
        codepoint = self.read_hex4(escape_offset)
        if 0xD800 <= codepoint <= 0xDBFF:
            if not (self.consume("\\") and self.consume("u")):
                self.fail(SURROGATE_INVALID, escape_offset)
            low = self.read_hex4(escape_offset)
            if not 0xDC00 <= low <= 0xDFFF:
                self.fail(SURROGATE_INVALID, escape_offset)
            codepoint = (((codepoint - 0xD800) << 10) | (low - 0xDC00)) + 0x10000
        return chr(codepoint).encode("utf-8", "surrogatepass")  # a lone low one as rapidjson

    def read_hex4(self, escape_offset):
        digits = self.data[self.pos:self.pos + 4]
        for byte in digits + b"\0" * (4 - len(digits)):
            if chr(byte) not in "0123456789abcdefABCDEF":
                self.fail(UNICODE_ESCAPE_INVALID_HEX, escape_offset)
            self.pos += 1
        return int(digits, 16)

    def read_number(self):
        start = self.pos
        is_negative = self.consume("-")
        char = chr(self.peek())
        if char in "IN":
            return self.read_nan_or_inf(is_negative)
        if char == "0":
            self.pos += 1
        elif "1" <= char <= "9":
            self.pos = _DIGITS.match(self.data, self.pos).end()
        else:
            self.fail(VALUE_INVALID)
        is_float = False
        if self.consume("."):
            if not chr(self.peek()).isdigit():
                self.fail(NUMBER_MISS_FRACTION)
            self.pos = _DIGITS.match(self.data, self.pos).end()
            is_float = True
        if self.consume("e") or self.consume("E"):
            is_float = True
            if not self.consume("+"):
                self.consume("-")
            if not chr(self.peek()).isdigit():
                self.fail(NUMBER_MISS_EXPONENT)
            self.pos = _DIGITS.match(self.data, self.pos).end()
        text = self.data[start:self.pos].decode("ascii")
        if not is_float:
            value = int(text)
            if INT64_MIN <= value <= UINT64_MAX:
                return value
        try:
            return _checked_float(text)  # rapidjson: a double (an integer past 64 bits too)
        except _TooBig:
            self.fail(NUMBER_TOO_BIG, start)

    def read_nan_or_inf(self, is_negative):
        """kParseNanAndInfFlag: NaN, Inf or Infinity, each optionally negative."""
        if self.consume("N"):
            if self.consume("a") and self.consume("N"):
                return math.nan
            self.fail(VALUE_INVALID)
        self.pos += 1  # the "I"
        if not (self.consume("n") and self.consume("f")):
            self.fail(VALUE_INVALID)
        if self.peek() == ord("i") and not all(self.consume(c) for c in "inity"):
            self.fail(VALUE_INVALID)
        return -math.inf if is_negative else math.inf
