"""`tailgate bench --otlp-endpoint`: a run as one OpenTelemetry trace, received by a real OTLP receiver.

The receiver (tests/otlp_receiver.py) decodes the export with the official ``opentelemetry-proto`` messages. The bench
runs as a real subprocess (``python -m tailgate bench``) so the receiver and an in-process gateway keep serving in
this test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import GatewayHandle, SimFactory
from otlp_receiver import GotSpan, Receiver

ROOT = Path(__file__).resolve().parents[2]


async def _bench(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``tailgate bench ARGS`` in a subprocess; (exit code, stdout + stderr)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COVERAGE_"))}
    environ |= {"PYTHONPATH": str(ROOT / "src"), **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tailgate",
        "bench",
        *args,
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def _requests(spans: list[GotSpan]) -> list[GotSpan]:
    return [s for s in spans if s.kind == "client" and s.scope == "tailgate.bench"]


@pytest.mark.timeout(60)
async def test_a_bench_run_is_one_trace_with_a_span_per_request(sim: SimFactory, tmp_path: Path) -> None:
    """Two levels of a closed loop: one trace, the root ``tailgate bench``, a span per level under it and a client
    span per request under its level, with the GenAI attributes and the measured tokens and TTFT of the results
    file (their sums agree); the trace id printed is the trace the receiver got."""
    provider = await sim("instant")
    receiver = await Receiver().start()
    out = tmp_path / "r.json"
    try:
        code, output = await _bench(
            *("--base-url", provider.url, "--model", "m", "--concurrency", "1,3", "--requests", "6"),
            *("--warmup", "0s", "--max-tokens", "8", "--out", str(out), "--otlp-endpoint", receiver.endpoint),
        )
    finally:
        await receiver.stop()
    assert code == 0, output
    printed = re.search(r"trace ([0-9a-f]{32}): (\d+) of (\d+) spans exported", output)
    assert printed is not None, output
    spans = receiver.spans
    assert {s.trace_id for s in spans} == {printed.group(1)}
    assert int(printed.group(2)) == int(printed.group(3)) == len(spans)
    (root,) = [s for s in spans if s.parent_id == ""]
    assert root.name == "tailgate bench"
    assert root.resource["service.name"] == "tailgate-bench"
    phases = sorted((s for s in spans if s.parent_id == root.span_id), key=lambda s: s.start_ns)
    assert [p.name for p in phases] == ["concurrency 1", "concurrency 3"]
    requests = _requests(spans)
    doc = json.loads(out.read_text())
    assert len(requests) == sum(r["requests"] for r in doc["runs"]) == 12
    for phase, run in zip(phases, doc["runs"], strict=True):
        mine = [s for s in requests if s.parent_id == phase.span_id]
        assert len(mine) == run["requests"]
        assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in mine) == run["tokens"]["output"]
        assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in mine) == run["tokens"]["input"]
        assert all(phase.start_ns <= s.start_ns <= s.end_ns <= phase.end_ns for s in mine)
    for span in requests:
        a = span.attributes
        assert span.name == "chat m"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "m"
        assert a["tailgate.target"] == "target"
        assert a["server.port"] == int(provider.url.rsplit(":", 1)[1].split("/")[0])
        assert a["tailgate.outcome"] == "ok"
        assert a["http.response.status_code"] == 200
        assert a["gen_ai.usage.input_tokens"] > 0
        assert a["gen_ai.usage.output_tokens"] == 8
        assert 0 < a["gen_ai.response.time_to_first_chunk"] * 1000 == pytest.approx(a["tailgate.ttft_ms"])
        assert a["tailgate.ttft_ms"] <= a["tailgate.e2e_ms"]
        assert span.end_ns - span.start_ns >= a["tailgate.e2e_ms"] * 1e6 * 0.999  # the span covers the call


@pytest.mark.timeout(60)
async def test_a_traced_gateway_under_test_joins_the_bench_trace(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """Each request carries its span's ``traceparent``: a gateway that traces puts its server span under the
    bench's request span (same trace, parent = that span), so one trace shows both sides; ``--workers 2``: both
    workers' spans are in the run's one trace, under its root."""
    provider = await sim("instant")
    receiver = await Receiver().start()
    config: dict[str, Any] = {
        "providers": {"p": {"base_url": provider.url, "api_keys": ["sk-p-0123456789"]}},
        "models": {"m": {"routes": [{"provider": "p", "model": "up-m"}]}},
        "telemetry": {"endpoint": receiver.endpoint, "schedule_delay": "50ms", "metrics": False},
    }
    gw = await gateway(config)
    try:
        code, output = await _bench(
            *("--base-url", gw.url, "--model", "m", "--concurrency", "2", "--requests", "8", "--workers", "2"),
            *("--warmup", "0s", "--max-tokens", "4", "--otlp-endpoint", receiver.endpoint, "--no-preflight"),
        )
        assert code == 0, output
        for _ in range(100):  # the gateway exports every 50 ms
            if len([s for s in receiver.spans if s.kind == "server"]) >= 8:
                break
            await asyncio.sleep(0.05)
    finally:
        await receiver.stop()
    requests = _requests(receiver.spans)
    assert len(requests) == 8  # 4 from each worker
    (trace_id,) = {s.trace_id for s in requests}
    (root,) = [s for s in receiver.spans if s.name == "tailgate bench"]
    phases = [s for s in receiver.spans if s.parent_id == root.span_id]
    assert len(phases) == 2
    assert {s.parent_id for s in requests} == {p.span_id for p in phases}
    servers = [s for s in receiver.spans if s.kind == "server"]
    assert len(servers) == 8
    by_id = {s.span_id: s for s in requests}
    for server in servers:
        assert server.trace_id == trace_id
        assert server.parent_id in by_id  # the bench request that sent it
        assert by_id[server.parent_id].start_ns <= server.start_ns


@pytest.mark.timeout(60)
async def test_a_dead_collector_costs_no_request_and_the_lost_spans_are_counted(sim: SimFactory) -> None:
    """``--otlp-endpoint`` at a port nobody listens on: every request succeeds, the run ends (the export waits at
    most its timeout), and the summary says how many spans were dropped."""
    provider = await sim("instant")
    receiver = await Receiver().start()
    dead = receiver.endpoint
    await receiver.stop()  # its port, now refused
    code, output = await _bench(
        *("--base-url", provider.url, "--model", "m", "--concurrency", "2", "--requests", "5", "--warmup", "0s"),
        *("--max-tokens", "4"),
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": dead, "OTEL_EXPORTER_OTLP_TIMEOUT": "500"},
    )
    assert code == 0, output
    assert re.search(r"done: concurrency 2 — 5 requests, 0 errors", output), output
    found = re.search(r"trace [0-9a-f]{32}: 0 of (\d+) spans exported, (\d+) dropped", output)
    assert found is not None, output
    assert int(found.group(1)) == int(found.group(2)) == 7  # 5 requests, the level, the root
