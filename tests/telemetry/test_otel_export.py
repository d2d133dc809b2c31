"""The telemetry layer on its own: settings from the config section and the ``OTEL_*`` variables, W3C
``traceparent``, content redaction, and the exporter against a real OTLP receiver — spans delivered, and every span
a dead collector cost counted (the SDK's batching processor's drop hook, which an SDK upgrade must keep)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from otlp_receiver import Receiver
from tailgate.config.telemetry_config import ContentConfig, TelemetryConfig
from tailgate.telemetry import SettingsError, SpanRecord, parse_traceparent, resolve, traceparent
from tailgate.telemetry.content import Redactor, input_messages, output_messages
from tailgate.telemetry.export import Exporter
from tailgate.telemetry.settings import Settings


def test_off_by_default_on_by_section_or_environment() -> None:
    """No section and no OTEL_* variable: off. A section: on (HTTP to localhost:4318). The environment alone:
    on at its endpoint. OTEL_SDK_DISABLED and ``enabled: false`` win over everything."""
    assert resolve(None, {}) is None
    on = resolve(TelemetryConfig(), {})
    assert on is not None
    assert on.protocol == "http/protobuf"
    assert on.traces_endpoint == "http://localhost:4318/v1/traces"
    assert on.metrics_endpoint == "http://localhost:4318/v1/metrics"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/", "OTEL_SERVICE_NAME": "gw-eu"}
    by_env = resolve(None, env)
    assert by_env is not None
    assert by_env.traces_endpoint == "http://collector:4318/v1/traces"
    assert by_env.service_name == "gw-eu"
    assert resolve(None, {**env, "OTEL_SDK_DISABLED": "true"}) is None
    assert resolve(TelemetryConfig(), {"OTEL_SDK_DISABLED": "TRUE"}) is None
    assert resolve(TelemetryConfig(enabled=False), env) is None
    assert resolve(None, {"OTEL_TRACES_EXPORTER": "otlp"}) is not None
    assert resolve(None, {"OTEL_TRACES_EXPORTER": "none"}) is None


def test_section_fields_win_over_variables_and_signals_can_be_off() -> None:
    """The file's fields win; an unset field takes its variable (ms for the BSP ones); OTEL_TRACES_EXPORTER=none
    keeps metrics only; gRPC keeps the base URL; a signal's own endpoint variable is a full URL."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100",
        "OTEL_BSP_SCHEDULE_DELAY": "250",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3000",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s%3Dcret,Other=2",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    s = resolve(TelemetryConfig(endpoint="http://file:4317", max_queue_size=10), env)
    assert s is not None
    assert s.protocol == "grpc"
    assert s.traces_endpoint == "http://file:4317"
    assert s.max_queue_size == 10
    assert s.max_export_batch_size == 10  # never above the queue
    assert s.schedule_delay_s == pytest.approx(0.25)
    assert s.export_timeout_s == pytest.approx(3.0)
    assert s.headers == {"x-api-key": "s=cret", "other": "2"}
    assert s.sample_ratio == pytest.approx(0.25)
    metrics_only = resolve(
        None, {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:9/v1/metrics", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert metrics_only is not None
    assert metrics_only.traces_endpoint is None
    assert metrics_only.metrics_endpoint == "http://m:9/v1/metrics"
    assert resolve(TelemetryConfig(traces=False), {}).traces_endpoint is None  # type: ignore[union-attr]
    assert "cret" not in repr(s)  # header values are never printed


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "-3"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ],
)
def test_a_bad_variable_is_an_error_naming_it(env: dict[str, str], named: str) -> None:
    """A variable whose value cannot be used stops the start with an error naming the variable."""
    with pytest.raises(SettingsError, match=named):
        resolve(TelemetryConfig(), env)


def test_config_section_is_strict() -> None:
    """Unknown fields, a non-URL endpoint, an unknown protocol and a bad redact pattern are config errors."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="endpont"):
        TelemetryConfig.model_validate({"endpont": "http://x"})
    with pytest.raises(ValidationError, match="http:// or https://"):
        TelemetryConfig.model_validate({"endpoint": "collector:4317"})
    with pytest.raises(ValidationError, match="protocol"):
        TelemetryConfig.model_validate({"protocol": "http/json"})
    with pytest.raises(ValidationError, match="not a regular expression"):
        ContentConfig.model_validate({"redact": ["(unclosed"]})


def test_traceparent_round_trip_and_invalid_values() -> None:
    """A valid traceparent is read (trace, parent span, sampled flag); an invalid one is ignored (None)."""
    tp = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
    assert tp is not None
    assert tp.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert tp.span_id == 0x00F067AA0BA902B7
    assert tp.sampled
    assert tp.tracestate == "k=v"
    assert traceparent(tp.trace_id, tp.span_id) == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    unsampled = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
    assert unsampled is not None
    assert not unsampled.sampled
    future = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
    assert future is not None  # a later version's first four fields are read
    for bad in (
        None,
        "",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  # version 00 has four fields
        "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",  # not hex
    ):
        assert parse_traceparent(bad) is None


def test_content_is_redacted_then_cut() -> None:
    """Built-in rules (API keys, bearer tokens, e-mail) and the config's patterns become [REDACTED]; a part longer
    than max_chars is cut after redaction (a secret across the cut is still caught); non-text parts are named."""
    clean = Redactor([r"ticket-\d+"], max_chars=40)
    secret = "sk-" + "a" * 30
    body = {
        "system": "be brief",
        "messages": [
            {"role": "user", "content": f"my key {secret} mail me@example.com ticket-42"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x" * 30 + " Bearer abcdefghijklmnop"},
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                ],
            },
        ],
    }
    out = input_messages(body, clean)
    assert out is not None
    assert secret not in out
    assert "me@example.com" not in out
    assert "ticket-42" not in out
    assert "abcdefghijklmnop" not in out
    assert "[REDACTED]" in out
    assert '"type": "image_url"' in out
    assert "data:" not in out
    assert '"role": "system"' in out
    answer = {"choices": [{"message": {"content": "fine " + secret}, "finish_reason": "stop"}]}
    got = output_messages(answer, clean)
    assert got is not None
    assert secret not in got
    assert '"finish_reason": "stop"' in got


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.stop()


def _settings(endpoint: str, **kw: object) -> Settings:
    base: dict[str, object] = {
        "protocol": "http/protobuf",
        "traces_endpoint": endpoint + "/v1/traces",
        "metrics_endpoint": None,
        "schedule_delay_s": 0.05,
        "export_timeout_s": 0.5,
    }
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


def _spans(n: int, trace_id: int = 0xABC) -> list[SpanRecord]:
    now = time.time_ns()
    return [SpanRecord(f"s{i}", "internal", trace_id, i + 1, None, now, now + 1000, {"i": i}) for i in range(n)]


def _count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_spans_reach_the_receiver(receiver: Receiver) -> None:
    """Emitted spans arrive with their ids, times, attributes and resource; each counted as exported."""
    registry = CollectorRegistry()
    ex = Exporter(_settings(receiver.endpoint), registry, scope="test", resource={"deployment.environment": "ci"})
    spans = _spans(3)
    ex.emit(spans)
    await asyncio.to_thread(ex.force_flush)
    await asyncio.to_thread(ex.shutdown)
    got = sorted(receiver.spans, key=lambda s: s.name)
    assert [s.name for s in got] == ["s0", "s1", "s2"]
    assert got[1].span_id == f"{2:016x}"
    assert got[1].trace_id == f"{0xABC:032x}"
    assert got[1].attributes == {"i": 1}
    assert got[1].start_ns == spans[1].start_ns
    assert got[0].resource["deployment.environment"] == "ci"
    assert got[0].scope == "test"
    assert _count(registry, "tailgate_otel_spans_exported_total") == 3


@pytest.mark.parametrize("mode", ["refuse", "hang"])
async def test_a_dead_collector_costs_counted_spans_never_a_wait(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    """Against a collector that refuses (503) or never answers: ``emit`` returns at once whatever the queue holds
    (it never waits on the export), and every span lost is counted — queue_full, export_failed and shutdown add up
    to the spans emitted (the SDK's queue may count a drop or two of a race twice), none exported, none logged."""
    receiver = await Receiver(mode=mode).start()  # type: ignore[arg-type]
    try:
        registry = CollectorRegistry()
        ex = Exporter(_settings(receiver.endpoint, max_queue_size=4, max_export_batch_size=2), registry)
        ex.emit(_spans(5))
        await asyncio.wait_for(receiver.posted.wait(), 10)  # the first export is out (and, hanging, stays out)
        for _ in range(9):
            ex.emit(_spans(5))  # 50 spans in all, far more than the queue holds while exports fail
        if mode == "hang":  # every emit returned while an export was still waiting for its answer
            assert any(not w.done() for w in receiver.hung)
        await asyncio.to_thread(ex.shutdown)
    finally:
        await receiver.stop()
    dropped = {
        r: _count(registry, "tailgate_otel_spans_dropped_total", reason=r)
        for r in ("queue_full", "export_failed", "shutdown")
    }
    assert dropped["queue_full"] >= 50 - 4 - 2 * 3  # at most the queue and a few batches in flight escaped it
    # Every span lost is counted. The SDK's queue counts a drop when it finds itself full, and its export thread may
    # take a batch between that look and the append: a drop counted that then did not happen (a few at most).
    assert 50 <= sum(dropped.values()) <= 54
    assert _count(registry, "tailgate_otel_spans_exported_total") == 0
    assert receiver.posts >= 1
    # counted, not logged span by span (the SDK's "Queue full" warning costs a log record per span dropped)
    assert not [r for r in caplog.records if "Queue full" in r.getMessage()]
