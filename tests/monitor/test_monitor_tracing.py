"""The monitor's rounds as OpenTelemetry traces, received by a real OTLP receiver (tests/otlp_receiver.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import GatewayHandle, SimFactory
from otlp_receiver import Receiver
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.samples import SampleStore
from tailgate.monitor.runner import Monitor, targets_from_config
from tailgate.monitor.tracing import round_tracer

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.timeout(60)
async def test_each_round_is_a_trace_and_each_probe_a_span_joined_only_where_the_provider_propagates(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], tmp_path: Path
) -> None:
    """Two rounds: two traces, each a root ``monitor round N`` with a client span per probe (provider, workload,
    model, tokens, TTFT, outcome as in the stored sample). The provider probed is a traced gateway, configured twice:
    with ``propagate_trace`` its server span joins the probe's trace under the probe's span; without, it starts a
    trace of its own (the probe's trace never leaves the monitor)."""
    upstream = await sim("instant")
    receiver = await Receiver().start()
    gw = await gateway(
        {
            "providers": {"up": {"base_url": upstream.url, "api_keys": ["sk-up-0123456789"]}},
            "models": {"m": {"routes": [{"provider": "up", "model": "up-m"}]}},
            "telemetry": {"endpoint": receiver.endpoint, "schedule_delay": "50ms", "metrics": False},
        }
    )
    data: dict[str, Any] = {
        "providers": {
            "traced": {"base_url": gw.url, "propagate_trace": True},
            "plain": {"base_url": gw.url},
        },
        "models": {"x": {"routes": [{"provider": "traced", "model": "m"}, {"provider": "plain", "model": "m"}]}},
        "telemetry": {"endpoint": receiver.endpoint, "schedule_delay": "50ms"},
    }
    cfg = validate_data(data, GatewayConfig, "test-config")
    tracer = round_tracer(cfg.telemetry, env={})
    assert tracer is not None
    assert round_tracer(None, env={}) is None  # no section, no OTEL_*: off
    try:
        async with SampleStore(tmp_path / "m.db") as store:
            monitor = Monitor(
                resolve_providers(cfg), targets_from_config(cfg), store, workloads=("short",), tracer=tracer
            )
            try:
                reports = [await monitor.run_round(i) for i in range(2)]
            finally:
                await monitor.close()
        # Blocking (the last export, bounded by its timeout): off the loop, as the monitor's command does it.
        assert await asyncio.to_thread(tracer.close) == (6, 0)  # 2 rounds x (root + 2 probes), all exported
        for _ in range(100):  # the gateway exports every 50 ms
            if len([s for s in receiver.spans if s.kind == "server"]) >= 4:
                break
            await asyncio.sleep(0.05)
    finally:
        await receiver.stop()
    mine = [s for s in receiver.spans if s.scope == "tailgate.monitor"]
    roots = sorted((s for s in mine if s.parent_id == ""), key=lambda s: s.start_ns)
    assert [r.name for r in roots] == ["monitor round 0", "monitor round 1"]
    assert len({r.trace_id for r in roots}) == 2
    assert roots[0].resource["service.name"] == "tailgate-monitor"
    servers = [s for s in receiver.spans if s.kind == "server"]
    for root, report in zip(roots, reports, strict=True):
        probes = [s for s in mine if s.parent_id == root.span_id]
        assert root.attributes["tailgate.probes"] == len(probes) == len(report.samples) == 2
        for probe in probes:
            a = probe.attributes
            (sample,) = [x for x in report.samples if x.provider == a["tailgate.provider"]]
            assert probe.kind == "client"
            assert probe.name == "chat m"
            assert probe.trace_id == root.trace_id
            assert a["tailgate.workload"] == "short"
            assert a["gen_ai.request.model"] == "m"
            assert a["tailgate.outcome"] == "ok"
            assert sample.ok
            assert a["gen_ai.usage.output_tokens"] == sample.output_tokens
            assert a["tailgate.ttft_ms"] == pytest.approx(sample.ttft_ms)
            joined = [s for s in servers if s.parent_id == probe.span_id]
            if a["tailgate.provider"] == "traced":
                assert len(joined) == 1
                assert joined[0].trace_id == root.trace_id
            else:
                assert joined == []
    assert len(servers) == 4
    assert sum(1 for s in servers if s.parent_id == "") == 2  # the plain provider's: traces of their own


@pytest.mark.timeout(60)
async def test_tailgate_monitor_once_exports_its_round_when_otel_variables_ask(sim: SimFactory, tmp_path: Path) -> None:
    """``tailgate monitor --once`` (a real subprocess) with only ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: its round reaches
    the receiver as one trace (the round and one span per workload) before the command exits 0; without the variable
    nothing is exported."""
    provider = await sim("instant")
    receiver = await Receiver().start()
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(
        f'providers:\n  a: {{base_url: "{provider.url}"}}\nmodels:\n  m: {{routes: [{{provider: a, model: up-m}}]}}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COVERAGE_"))}
    env["PYTHONPATH"] = str(SRC)
    argv = [sys.executable, "-m", "tailgate", "monitor", "--config", str(cfg), "--db", str(tmp_path / "m.db")]
    try:
        for extra in ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}):
            proc = await asyncio.create_subprocess_exec(
                *argv, "--once", env=env | extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
            out, _ = await proc.communicate()
            assert proc.returncode == 0, out.decode()
            if not extra:
                assert receiver.spans == []
    finally:
        await receiver.stop()
    (root,) = [s for s in receiver.spans if s.parent_id == ""]
    assert root.name == "monitor round 0"
    assert root.resource["service.name"] == "tailgate-monitor"
    probes = [s for s in receiver.spans if s.parent_id == root.span_id]
    assert sorted(p.attributes["tailgate.workload"] for p in probes) == ["accuracy", "long", "short"]
    assert all(p.trace_id == root.trace_id for p in probes)
