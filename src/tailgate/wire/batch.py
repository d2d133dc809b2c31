"""OpenAI's Batch API on the wire: the File and Batch objects, the JSONL lines, and a validating input parser.

Shapes follow OpenAI's API reference as the official SDK types it (openai-python 3.57,
``src/openai/types/batch.py``, ``batch_error.py``, ``batch_request_counts.py``, ``batch_usage.py``,
``file_object.py``, ``file_deleted.py``; ``batch_create_params.py`` for the create body) and the OpenAPI
spec's ``BatchRequestInput`` / ``BatchRequestOutput`` for the lines (platform.openai.com/docs/api-reference/
batch/request-input and .../request-output). Every key OpenAI sends is encoded, ``null`` when unset, because
clients read ``batch.output_file_id`` and friends without checking they exist.

A batch walks ``validating → in_progress → finalizing → completed``; ``validating`` may end in ``failed``
(the input file is invalid: ``errors.data`` names each bad line), ``in_progress`` in ``expired`` (the
completion window closed) or ``cancelling → cancelled``. :data:`TRANSITIONS` states the graph.

The input parser (:func:`parse_input_file`) checks what OpenAI checks before it runs a line — JSON, the four
keys, ``custom_id`` unique, ``method`` POST, ``url`` one of :data:`BATCH_ENDPOINTS` and the batch's own
endpoint, a ``body`` object naming a ``model`` (one model per file, as OpenAI requires) — within
:class:`BatchLimits`, and reports every problem it finds (up to ``max_errors``) as a :class:`BatchError`
naming the line and the field. The error codes are OpenAI's where it documents one (``invalid_json_line``,
``duplicate_custom_id``, ``url_mismatch``, ``model_mismatch``, ``empty_file``, ``too_many_tasks``).

Subclass :class:`Batch` to add extension fields (a gateway's cost): msgspec encodes a subclass's extra
fields after OpenAI's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar, get_args

import msgspec

from tailgate.wire.errors import WireError, invalid_request

__all__ = [
    "BATCH_ENDPOINTS",
    "BATCH_STATUSES",
    "DEFAULT_LIMITS",
    "TERMINAL_STATUSES",
    "TRANSITIONS",
    "Batch",
    "BatchCreateRequest",
    "BatchEndpoint",
    "BatchError",
    "BatchErrors",
    "BatchInputError",
    "BatchLimits",
    "BatchLineError",
    "BatchRequestCounts",
    "BatchRequestInput",
    "BatchRequestOutput",
    "BatchResponse",
    "BatchStatus",
    "BatchUsage",
    "FileDeleted",
    "FileObject",
    "FilePurpose",
    "InputTokensDetails",
    "ListPage",
    "OutputTokensDetails",
    "decode_batch_create",
    "decode_output_file",
    "encode_jsonl",
    "parse_completion_window",
    "parse_input_file",
]

# ---- statuses and endpoints --------------------------------------------------------------------

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
"""``Batch.status`` as openai-python types it (types/batch.py)."""
BATCH_STATUSES: Final[tuple[str, ...]] = get_args(BatchStatus)
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"failed", "completed", "expired", "cancelled"})
"""A batch in one of these never changes again; its files are final."""
TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    "validating": frozenset({"failed", "in_progress", "cancelling"}),
    "in_progress": frozenset({"finalizing", "expired", "cancelling"}),
    "finalizing": frozenset({"completed", "expired"}),
    "cancelling": frozenset({"cancelled"}),
    "failed": frozenset(),
    "completed": frozenset(),
    "expired": frozenset(),
    "cancelled": frozenset(),
}
"""Which status may follow which (OpenAI's batch guide, "Batch statuses")."""

BatchEndpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
"""The endpoints a tailgate batch may target: OpenAI's text ones (batch_create_params.py also lists
moderations, images and videos, which tailgate does not serve)."""
BATCH_ENDPOINTS: Final[tuple[str, ...]] = get_args(BatchEndpoint)

FilePurpose = Literal[
    "assistants", "assistants_output", "batch", "batch_output", "fine-tune", "fine-tune-results", "vision", "user_data"
]
"""``FileObject.purpose`` (types/file_object.py); a batch's input is ``batch``, its output and error files
``batch_output``."""

# ---- the File object ----------------------------------------------------------------------------


class FileObject(msgspec.Struct, kw_only=True):
    """An uploaded file (``POST /v1/files``; types/file_object.py)."""

    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    """Unix seconds."""
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    """Deprecated by OpenAI, still sent."""
    expires_at: int | None = None
    status_details: str | None = None


class FileDeleted(msgspec.Struct, kw_only=True):
    """``DELETE /v1/files/{id}`` (types/file_deleted.py)."""

    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


_T = TypeVar("_T")


class ListPage(msgspec.Struct, Generic[_T], kw_only=True):
    """A cursor page (``GET /v1/files``, ``GET /v1/batches``): the SDK's ``CursorPage`` reads ``data`` and
    ``has_more`` and asks for the next page with ``after=<last id>`` (openai/pagination.py)."""

    object: Literal["list"] = "list"
    data: list[_T]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


# ---- the Batch object ---------------------------------------------------------------------------


class BatchError(msgspec.Struct, kw_only=True):
    """One problem with a batch's input (types/batch_error.py): ``line`` is 1-based, ``param`` the field."""

    code: str
    message: str
    param: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        field = f" ({self.param})" if self.param else ""
        return f"{where}{field}: {self.message}"


class BatchErrors(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[BatchError]


class BatchRequestCounts(msgspec.Struct, kw_only=True):
    """``completed`` lines answered 2xx, ``failed`` the rest; at the end ``completed + failed == total``."""

    total: int = 0
    completed: int = 0
    failed: int = 0


class InputTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0


class OutputTokensDetails(msgspec.Struct, kw_only=True):
    reasoning_tokens: int = 0


class BatchUsage(msgspec.Struct, kw_only=True):
    """Token usage of the batch's completed lines (types/batch_usage.py)."""

    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = msgspec.field(default_factory=OutputTokensDetails)
    total_tokens: int = 0


class Batch(msgspec.Struct, kw_only=True):
    """The Batch object (types/batch.py). Timestamps are Unix seconds, ``None`` until the batch gets there."""

    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    """Lines answered 2xx; ``None`` when there are none (as OpenAI does)."""
    error_file_id: str | None = None
    """Every other line (a non-2xx answer, or not run: expired, cancelled); ``None`` when there are none."""
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: BatchRequestCounts = msgspec.field(default_factory=BatchRequestCounts)
    metadata: dict[str, str] | None = None
    model: str | None = None
    usage: BatchUsage | None = None


class BatchCreateRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``POST /v1/batches`` body (types/batch_create_params.py)."""

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None


# ---- lines ---------------------------------------------------------------------------------------


class BatchRequestInput(msgspec.Struct, kw_only=True):
    """One line of an input file: ``{"custom_id", "method": "POST", "url", "body"}``."""

    custom_id: str
    method: Literal["POST"] = "POST"
    url: str
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))


class BatchResponse(msgspec.Struct, kw_only=True):
    """The HTTP answer a line got: OpenAI puts a non-2xx answer here too (with its error body)."""

    status_code: int
    request_id: str
    body: Any


class BatchLineError(msgspec.Struct, kw_only=True):
    """Why a line has no answer at all (``batch_expired``, ``batch_cancelled``)."""

    code: str
    message: str


class BatchRequestOutput(msgspec.Struct, kw_only=True):
    """One line of an output or error file: exactly one of ``response`` / ``error`` is set."""

    id: str
    custom_id: str
    response: BatchResponse | None = None
    error: BatchLineError | None = None

    @property
    def ok(self) -> bool:
        """Answered 2xx (belongs in the output file, not the error file)."""
        return self.response is not None and 200 <= self.response.status_code < 300


_jsonl_encoder = msgspec.json.Encoder()


def encode_jsonl(items: Iterable[msgspec.Struct]) -> bytes:
    """JSONL: one JSON object per line, each line ending in ``\\n``."""
    return b"".join(_jsonl_encoder.encode(item) + b"\n" for item in items)


_output_decoder = msgspec.json.Decoder(BatchRequestOutput)


def decode_output_file(data: bytes) -> list[BatchRequestOutput]:
    """A provider's output or error file, line by line (blank lines skipped); ``ValueError`` names the line."""
    out = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append(_output_decoder.decode(raw))
        except msgspec.DecodeError as exc:
            raise ValueError(f"line {number}: not a batch output line: {exc}") from None
    return out


# ---- the create body -----------------------------------------------------------------------------

_WINDOW = re.compile(r"^([1-9][0-9]{0,4})([hd])$")
METADATA_PAIRS: Final = 16
METADATA_KEY_CHARS: Final = 64
METADATA_VALUE_CHARS: Final = 512


def parse_completion_window(value: str, *, min_s: float = 3600.0, max_s: float = 14 * 86400.0) -> float:
    """``"24h"`` → 86400.0 seconds. OpenAI accepts only ``24h``; Bailian ``24h`` … ``336h`` (or days, ``14d``);
    the caller's bounds decide (``ValueError`` with a message for the client)."""
    match = _WINDOW.match(value)
    if match is None:
        raise ValueError(f"completion_window must be a number of hours or days such as '24h', got {value!r}")
    seconds = int(match.group(1)) * (3600.0 if match.group(2) == "h" else 86400.0)
    if not min_s <= seconds <= max_s:
        raise ValueError(
            f"completion_window {value!r} is outside {_hours(min_s)} … {_hours(max_s)} (the supported windows)"
        )
    return seconds


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g}h"


_create_decoder = msgspec.json.Decoder(BatchCreateRequest)


def decode_batch_create(
    body: bytes,
    *,
    endpoints: Sequence[str] = BATCH_ENDPOINTS,
    min_window_s: float = 3600.0,
    max_window_s: float = 14 * 86400.0,
) -> tuple[BatchCreateRequest, float]:
    """Decode and check a ``POST /v1/batches`` body; the request and its window in seconds, or a 400
    :class:`WireError` whose ``param`` names the field."""
    try:
        req = _create_decoder.decode(body)
    except msgspec.ValidationError as exc:
        text = str(exc)
        unknown = re.search(r"unknown field `(\w+)`", text)
        missing = re.search(r"missing required field `(\w+)`", text)
        found = unknown or missing or re.search(r"\$\.(\w+)", text)
        param = found.group(1) if found is not None else None
        if unknown:
            raise invalid_request(f"Unrecognized request argument supplied: {param}", param=param) from None
        if missing:
            raise invalid_request(f"Missing required parameter: '{param}'.", param=param) from None
        raise invalid_request(f"Invalid value: {text}", param=param) from None
    except msgspec.DecodeError as exc:
        raise invalid_request(f"The request body is not valid JSON: {exc}") from None
    if req.endpoint not in endpoints:
        raise invalid_request(
            f"Invalid value for 'endpoint': {req.endpoint!r}. Supported: {', '.join(endpoints)}.", param="endpoint"
        )
    try:
        window = parse_completion_window(req.completion_window, min_s=min_window_s, max_s=max_window_s)
    except ValueError as exc:
        raise invalid_request(str(exc), param="completion_window") from None
    if (problem := _metadata_problem(req.metadata)) is not None:
        raise invalid_request(problem, param="metadata")
    return req, window


def _metadata_problem(metadata: dict[str, str] | None) -> str | None:
    """OpenAI's rule (types/shared/metadata.py): at most 16 pairs, keys ≤ 64 chars, values ≤ 512 chars."""
    if metadata is None:
        return None
    if len(metadata) > METADATA_PAIRS:
        return f"metadata has {len(metadata)} keys; at most {METADATA_PAIRS} are allowed."
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            return f"metadata key {key[:80]!r} is longer than {METADATA_KEY_CHARS} characters."
        if len(value) > METADATA_VALUE_CHARS:
            return f"metadata value of {key!r} is longer than {METADATA_VALUE_CHARS} characters."
    return None


# ---- the input parser ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What an input file may hold. Defaults are OpenAI's published limits where it has one."""

    max_file_bytes: int = 200 * 1024 * 1024
    """OpenAI: "up to 200 MB" per batch input file (batch_create_params.py)."""
    max_lines: int = 50_000
    """OpenAI: "up to 50,000 requests" per file."""
    max_line_bytes: int = 8 * 1024 * 1024
    """One line is one request body: tailgate's own choice, the gateway's default ``max_body_bytes``."""
    max_custom_id_chars: int = 512
    """tailgate's choice (OpenAI states none): long enough for any UUID-plus-context scheme."""
    single_model: bool = True
    """Every line's ``body.model`` the same, as OpenAI and Bailian require of one input file."""
    max_errors: int = 100
    """Stop reporting after this many problems (the file is refused either way)."""


DEFAULT_LIMITS: Final = BatchLimits()
_Report = Callable[..., bool]
"""``bad(code, message, line=None, param=None)``: record a problem; True once ``max_errors`` are recorded."""
_LINE_KEYS: Final = frozenset({"custom_id", "method", "url", "body"})
_BOM: Final = b"\xef\xbb\xbf"


class BatchInputError(ValueError):
    """The input file is invalid; ``errors`` names each bad line and field (at most ``max_errors``)."""

    def __init__(self, errors: list[BatchError]) -> None:
        self.errors = errors
        shown = "; ".join(str(e) for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(f"invalid batch input file: {shown}{more}")

    def as_batch_errors(self) -> BatchErrors:
        """``Batch.errors`` of a batch that failed validation."""
        return BatchErrors(data=list(self.errors))

    def as_wire_error(self) -> WireError:
        """A 400 for a caller that refuses the file at once (its first problem names the param)."""
        first = self.errors[0]
        return invalid_request(str(self), param=first.param, code=first.code)


def parse_input_file(
    data: bytes, *, endpoint: str | None = None, limits: BatchLimits = DEFAULT_LIMITS
) -> list[BatchRequestInput]:
    """Every line of a batch input file, checked; :class:`BatchInputError` lists what is wrong.

    ``endpoint`` (the batch's) makes a line with another ``url`` an error (OpenAI: one endpoint per batch);
    None only checks that each ``url`` is one of :data:`BATCH_ENDPOINTS`. Blank lines are skipped (line
    numbers still count them); a UTF-8 byte-order mark before the first line is ignored.
    """
    errors: list[BatchError] = []

    def bad(code: str, message: str, line: int | None = None, param: str | None = None) -> bool:
        errors.append(BatchError(code=code, message=message, line=line, param=param))
        return len(errors) >= limits.max_errors

    if len(data) > limits.max_file_bytes:
        bad(
            "file_too_large",
            f"The file is {len(data)} bytes; a batch input file may be at most {limits.max_file_bytes}.",
        )
        raise BatchInputError(errors)
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    lines: list[BatchRequestInput] = []
    seen: dict[str, int] = {}
    model: tuple[str, int] | None = None
    count = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        count += 1
        if count > limits.max_lines:
            bad(
                "too_many_tasks",
                f"The file has more than {limits.max_lines} requests, the most one batch may hold.",
                number,
            )
            break
        line = _check_line(raw, number, endpoint, limits, bad)
        if line is None:
            if len(errors) >= limits.max_errors:
                break
            continue
        if (first := seen.get(line.custom_id)) is not None:
            if bad(
                "duplicate_custom_id",
                f"custom_id {line.custom_id!r} is also on line {first}; each must be unique.",
                number,
                "custom_id",
            ):
                break
            continue
        seen[line.custom_id] = number
        if limits.single_model:
            if model is None:
                model = (line.model, number)
            elif line.model != model[0]:
                msg = f"body.model {line.model!r} differs from {model[0]!r} on line {model[1]}; one model per batch."
                if bad("model_mismatch", msg, number, "body.model"):
                    break
                continue
        lines.append(line)
    if not errors and not lines:
        bad("empty_file", "The file has no requests.")
    if errors:
        raise BatchInputError(errors)
    return lines


def _check_line(
    raw: bytes, number: int, endpoint: str | None, limits: BatchLimits, bad: _Report
) -> BatchRequestInput | None:
    """One line, or None after reporting why it is refused (first problem only: the rest may follow from it)."""
    if len(raw) > limits.max_line_bytes:
        bad("line_too_long", f"The line is {len(raw)} bytes; one line may be at most {limits.max_line_bytes}.", number)
        return None
    try:
        obj = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, msgspec.DecodeError) else "nested too deeply"
        bad("invalid_json_line", f"This line is not parseable as valid JSON: {reason}.", number)
        return None
    if not isinstance(obj, dict):
        bad("invalid_json_line", f"A line must be a JSON object, not {type(obj).__name__}.", number)
        return None
    for key in obj:
        if key not in _LINE_KEYS:
            bad(
                "unknown_parameter",
                f"Unrecognized key {key!r}: a line has custom_id, method, url and body.",
                number,
                key,
            )
            return None
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        what = "is missing" if custom_id is None else "must be a non-empty string"
        bad(
            "missing_required_parameter" if custom_id is None else "invalid_type",
            f"custom_id {what}.",
            number,
            "custom_id",
        )
        return None
    if len(custom_id) > limits.max_custom_id_chars:
        bad("invalid_value", f"custom_id is longer than {limits.max_custom_id_chars} characters.", number, "custom_id")
        return None
    method = obj.get("method")
    if method != "POST":
        what = "is missing" if method is None else f"must be 'POST', got {method!r}"
        bad(
            "invalid_method" if method is not None else "missing_required_parameter",
            f"method {what}.",
            number,
            "method",
        )
        return None
    url = obj.get("url")
    if not isinstance(url, str) or url not in BATCH_ENDPOINTS:
        what = "is missing" if url is None else f"{url!r} is not one of {', '.join(BATCH_ENDPOINTS)}"
        bad("invalid_url" if url is not None else "missing_required_parameter", f"url {what}.", number, "url")
        return None
    if endpoint is not None and url != endpoint:
        bad(
            "url_mismatch",
            f"url {url!r} differs from the batch's endpoint {endpoint!r}; one endpoint per batch.",
            number,
            "url",
        )
        return None
    body = obj.get("body")
    if not isinstance(body, dict):
        what = "is missing" if body is None else "must be a JSON object"
        bad("missing_required_parameter" if body is None else "invalid_type", f"body {what}.", number, "body")
        return None
    model = body.get("model")
    if not isinstance(model, str) or not model:
        what = "is missing" if model is None else "must be a non-empty string"
        bad(
            "missing_required_parameter" if model is None else "invalid_type",
            f"body.model {what}.",
            number,
            "body.model",
        )
        return None
    return BatchRequestInput(custom_id=custom_id, url=url, body=body)
