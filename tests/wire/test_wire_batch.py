"""wire/batch.py: OpenAI's Batch and File shapes, and an input parser whose every error names the line and field."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from openai.types import Batch as SdkBatch
from openai.types import FileObject as SdkFileObject

from tailgate.wire.batch import (
    BATCH_ENDPOINTS,
    BATCH_STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    Batch,
    BatchError,
    BatchInputError,
    BatchLimits,
    BatchRequestOutput,
    BatchResponse,
    FileObject,
    decode_batch_create,
    decode_output_file,
    encode_jsonl,
    parse_completion_window,
    parse_input_file,
)
from tailgate.wire.errors import WireError
from tailgate.wire.multipart import parse_form_data


def line(i: int | str = 0, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "custom_id": f"r{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def jsonl(*lines: dict[str, Any] | bytes) -> bytes:
    return b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)


def problems(data: bytes, **kwargs: Any) -> list[tuple[int | None, str, str | None]]:
    with pytest.raises(BatchInputError) as err:
        parse_input_file(data, **kwargs)
    return [(e.line, e.code, e.param) for e in err.value.errors]


def test_the_batch_object_is_what_the_openai_sdk_reads() -> None:
    """A Batch encodes every key OpenAI sends; the SDK's own model parses it, nulls included."""
    batch = Batch(
        id="batch_1",
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        status="in_progress",
        created_at=1,
        metadata={"a": "b"},
    )
    raw = msgspec.json.decode(msgspec.json.encode(batch))
    assert {"output_file_id", "error_file_id", "errors", "cancelled_at", "expired_at", "failed_at"} <= set(raw)
    assert raw["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    parsed = SdkBatch.model_validate(raw)
    assert parsed.status == "in_progress"
    assert parsed.request_counts is not None
    assert parsed.metadata == {"a": "b"}
    sdk_statuses = SdkBatch.model_fields["status"].annotation.__args__  # type: ignore[union-attr]
    assert set(BATCH_STATUSES) == set(sdk_statuses)
    f = FileObject(id="file-1", bytes=3, created_at=1, filename="a.jsonl", purpose="batch")
    assert SdkFileObject.model_validate(msgspec.json.decode(msgspec.json.encode(f))).purpose == "batch"


def test_transitions_lead_only_to_terminal_statuses() -> None:
    """Every status is in the graph, terminal ones lead nowhere, and every path ends in one."""
    assert set(TRANSITIONS) == set(BATCH_STATUSES)
    for status in TERMINAL_STATUSES:
        assert TRANSITIONS[status] == frozenset()
    assert TRANSITIONS["validating"] == {"failed", "in_progress", "cancelling"}
    assert TRANSITIONS["cancelling"] == {"cancelled"}


def test_a_valid_file_parses_in_order() -> None:
    """Blank lines and a byte-order mark are skipped; each line keeps its custom_id and body."""
    data = b"\xef\xbb\xbf" + jsonl(line(1), line(2)) + b"\n  \n" + jsonl(line(3))
    parsed = parse_input_file(data, endpoint="/v1/chat/completions")
    assert [x.custom_id for x in parsed] == ["r1", "r2", "r3"]
    assert parsed[0].body["model"] == "m"
    assert parsed[0].method == "POST"


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (b"{nope", ("invalid_json_line", None)),
        (b"[1, 2]", ("invalid_json_line", None)),
        (line(params={"model": "m"}, body=None), ("unknown_parameter", "params")),
        (line(custom_id=None), ("missing_required_parameter", "custom_id")),
        (line(custom_id=7), ("invalid_type", "custom_id")),
        (line(custom_id="x" * 513), ("invalid_value", "custom_id")),
        (line(method="GET"), ("invalid_method", "method")),
        (line(url="/v1/moderations"), ("invalid_url", "url")),
        (line(url="/v1/embeddings"), ("url_mismatch", "url")),
        (line(body=None), ("missing_required_parameter", "body")),
        (line(body="text"), ("invalid_type", "body")),
        (line(body={"messages": []}), ("missing_required_parameter", "body.model")),
        (line(i=9, body={"model": "other"}), ("model_mismatch", "body.model")),
    ],
)
def test_each_bad_line_is_named_with_its_field(bad: dict[str, Any] | bytes, expected: tuple[str, str | None]) -> None:
    """One bad line among good ones: the error says which line (1-based, blank lines counted) and which field."""
    data = jsonl(line(1)) + b"\n" + jsonl(bad, line(2))
    assert problems(data, endpoint="/v1/chat/completions") == [(3, *expected)]


def test_duplicates_name_both_lines_and_every_problem_is_reported() -> None:
    """Every bad line is listed (not just the first), and a duplicate names where its twin is."""
    data = jsonl(line(1), line(2), line(1), b"oops", line(2))
    with pytest.raises(BatchInputError) as err:
        parse_input_file(data)
    errors = err.value.errors
    assert [(e.line, e.code) for e in errors] == [
        (3, "duplicate_custom_id"),
        (4, "invalid_json_line"),
        (5, "duplicate_custom_id"),
    ]
    assert "line 1" in errors[0].message
    assert "line 3 (custom_id)" in str(err.value)
    wire = err.value.as_wire_error()
    assert wire.status == 400
    assert wire.param == "custom_id"
    assert err.value.as_batch_errors().data == errors


def test_limits_are_enforced_with_clear_errors() -> None:
    """File size, line count and line length each have their own error; max_errors caps the list."""
    limits = BatchLimits(max_file_bytes=10_000, max_lines=3, max_line_bytes=300, max_errors=2)
    assert problems(b"x" * 10_001, limits=limits) == [(None, "file_too_large", None)]
    assert problems(jsonl(*(line(i) for i in range(4))), limits=limits) == [(4, "too_many_tasks", None)]
    long = line(1, body={"model": "m", "messages": [{"role": "user", "content": "x" * 400}]})
    assert problems(jsonl(line(0), long), limits=limits) == [(2, "line_too_long", None)]
    assert len(problems(jsonl(b"a", b"b", b"c"), limits=limits)) == 2
    assert problems(b"\n\n") == [(None, "empty_file", None)]
    mixed = jsonl(line(1), line(2, body={"model": "other"}))
    assert parse_input_file(mixed, limits=BatchLimits(single_model=False))[1].body["model"] == "other"


def test_every_batch_endpoint_is_accepted() -> None:
    """chat, completions, embeddings and responses lines parse, each under its own batch endpoint."""
    for url in BATCH_ENDPOINTS:
        assert parse_input_file(jsonl(line(1, url=url)), endpoint=url)[0].url == url


def test_create_body_is_checked_field_by_field() -> None:
    """decode_batch_create: the window in seconds, and a 400 naming each bad field."""
    ok = {"input_file_id": "file-1", "endpoint": "/v1/embeddings", "completion_window": "24h"}
    req, window = decode_batch_create(json.dumps(ok).encode())
    assert (req.input_file_id, window) == ("file-1", 86400.0)
    for change, param in (
        ({"endpoint": "/v1/images/edits"}, "endpoint"),
        ({"completion_window": "soon"}, "completion_window"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"surprise": 1}, "surprise"),
        ({"input_file_id": 5}, "input_file_id"),
    ):
        with pytest.raises(WireError) as err:
            decode_batch_create(json.dumps({**ok, **change}).encode())
        assert err.value.status == 400
        assert err.value.param == param
    with pytest.raises(WireError) as missing:
        decode_batch_create(b'{"endpoint": "/v1/embeddings", "completion_window": "24h"}')
    assert missing.value.param == "input_file_id"


def test_completion_windows() -> None:
    """Hours or days, bounded by the caller (OpenAI: 24h only; Bailian up to 336h)."""
    assert parse_completion_window("24h") == 86400.0
    assert parse_completion_window("2d") == 2 * 86400.0
    assert parse_completion_window("24h", min_s=86400, max_s=86400) == 86400.0
    for bad in ("0h", "24", "1.5h", "15d", "h"):
        with pytest.raises(ValueError, match="completion_window"):
            parse_completion_window(bad)


def test_output_lines_round_trip() -> None:
    """encode_jsonl writes one object per line; decode_output_file reads a provider's file back."""
    items = [
        BatchRequestOutput(
            id="batch_req_1",
            custom_id="a",
            response=BatchResponse(status_code=200, request_id="req_1", body={"id": "x"}),
        ),
        BatchRequestOutput(
            id="batch_req_2",
            custom_id="b",
            response=BatchResponse(status_code=400, request_id="req_2", body={"error": {}}),
        ),
    ]
    data = encode_jsonl(items)
    assert data.count(b"\n") == 2
    assert json.loads(data.splitlines()[0])["error"] is None
    back = decode_output_file(data + b"\n")
    assert back == items
    assert [x.ok for x in back] == [True, False]
    with pytest.raises(ValueError, match="line 2"):
        decode_output_file(data.splitlines()[0] + b"\n{}\n")
    assert str(BatchError(code="c", message="m", line=3, param="url")) == "line 3 (url): m"


def test_multipart_upload_is_parsed_byte_for_byte() -> None:
    """The openai SDK's upload form: purpose and file, the file's bytes exactly as sent."""
    content = b'{"a": 1}\r\n{"b": "--x"}\n'
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    parts = parse_form_data(f"multipart/form-data; boundary={boundary}", body)
    assert parts["purpose"].text() == "batch"
    assert parts["file"].data == content
    assert parts["file"].filename == "in.jsonl"
    for ct, raw in (("application/json", body), (f"multipart/form-data; boundary={boundary}", body[:-5])):
        with pytest.raises(WireError) as err:
            parse_form_data(ct, raw)
        assert err.value.status == 400
