"""``multipart/form-data`` bodies (RFC 7578), parsed from bytes already read: ``POST /v1/files`` uploads.

The servers read a POST body whole before any handler runs (size and time limits, ``tailgate._aiohttp``), so
aiohttp's streaming ``request.post()`` has nothing left to read; this parses the same bytes. A part's content
is kept byte for byte (a JSONL file's size is what the File object reports).
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser

from tailgate.wire.errors import WireError, invalid_request

__all__ = ["FormPart", "parse_form_data"]

MAX_PARTS = 64
"""A form with more parts than this is refused (an upload has two: ``purpose`` and ``file``)."""


@dataclass(frozen=True, slots=True)
class FormPart:
    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def boundary_of(content_type: str) -> str | None:
    """The ``boundary`` parameter of a ``multipart/form-data`` Content-Type header, or None."""
    msg = Message()
    msg["Content-Type"] = content_type
    if msg.get_content_type() != "multipart/form-data":
        return None
    boundary = msg.get_param("boundary")
    return boundary if isinstance(boundary, str) and 0 < len(boundary) <= 200 else None


def parse_form_data(content_type: str, body: bytes) -> dict[str, FormPart]:
    """The parts of a form by name (the first of a repeated name wins), or a 400 :class:`WireError`."""
    boundary = boundary_of(content_type)
    if boundary is None:
        raise _bad("Expected a multipart/form-data body with a boundary (an upload: fields 'purpose' and 'file').")
    # RFC 2046 §5.1.1: a delimiter is CRLF "--" boundary; the first one may open the body without the CRLF.
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    chunks = (b"\r\n" + body).split(delimiter)
    # chunks[0] is the preamble; the close delimiter leaves a last chunk starting with "--".
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise _bad("The multipart body is not terminated by its closing boundary.")
    if len(chunks) - 2 > MAX_PARTS:
        raise _bad(f"The form has more than {MAX_PARTS} parts.")
    parts: dict[str, FormPart] = {}
    for chunk in chunks[1:-1]:
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep or not head.startswith(b"\r\n"):
            raise _bad("A multipart part has no blank line between its headers and its content.")
        headers = BytesHeaderParser().parsebytes(head[2:] + b"\r\n\r\n")
        if headers.get_content_disposition() != "form-data":
            raise _bad("Each part needs 'Content-Disposition: form-data; name=...'.")
        name = headers.get_param("name", header="content-disposition")
        if not isinstance(name, str) or not name:
            raise _bad("A form part has no name.")
        filename = headers.get_filename()
        parts.setdefault(name, FormPart(name, data, filename, headers.get("Content-Type")))
    return parts


def _bad(message: str) -> WireError:
    return invalid_request(message, code="invalid_multipart")
