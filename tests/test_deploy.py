"""deploy/: the Grafana dashboard and Prometheus config name only what a running gateway exports."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from conftest import GatewayHandle, SimFactory, two_provider_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def _exprs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def _family(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


async def test_grafana_dashboard_queries_only_metrics_the_gateway_exports(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """Every tailgate_* series in the dashboard's expressions is a family in a live gateway's /metrics."""
    dashboard = json.loads((DEPLOY / "grafana" / "tailgate-dashboard.json").read_text(encoding="utf-8"))
    exprs = _exprs(dashboard["panels"])
    assert len(exprs) >= 15
    used = {_family(m) for e in exprs for m in re.findall(r"\btailgate_[a-z0-9_]+", e)}
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    config = two_provider_config(a.url, b.url, routing={"policy": "adaptive", "hedge": {"after": "p90"}})
    config["providers"]["primary"]["price"] = {"input": 2.0, "output": 3.0}
    gw = await gateway(config)
    body = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(f"{gw.url}/chat/completions", json=body) as r:
                assert r.status == 200
                await r.read()
        async with session.get(f"{gw.root_url}/metrics") as r:
            text = await r.text()
    exported = {_family(m) for m in re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE)}
    assert used, "the dashboard queries no tailgate metric"
    assert used <= exported, f"not exported: {sorted(used - exported)}"


def test_prometheus_scrapes_every_gateway_replica_of_the_compose_file() -> None:
    """prometheus.yml discovers every replica of the gateway service on 8080 (DNS); the load balancer
    publishes 8080; the gateway config the replicas mount shares state through the compose file's Redis."""
    from tailgate.config.loader import validate_data
    from tailgate.config.schema import GatewayConfig

    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    job = prom["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics"
    assert job["dns_sd_configs"][0] == {"names": ["gateway"], "type": "A", "port": 8080}
    assert compose["services"]["gateway"]["expose"] == ["8080"]
    assert compose["services"]["gateway"]["deploy"]["replicas"] >= 2
    assert "8080:8080" in compose["services"]["lb"]["ports"]
    assert "server gateway:8080" in (DEPLOY / "nginx.conf").read_text(encoding="utf-8")
    assert set(compose["services"]) >= {"gateway", "lb", "redis", "prometheus"}
    env = {"TG_CLIENT_KEY": "tg-client-key-0123", "TG_ADMIN_KEY": "admin-key-0123456789", "LANYUN_KEY": "sk-l"}
    env["BAILIAN_KEY"] = "sk-b"
    from tailgate.config.loader import interpolate

    data = interpolate(yaml.safe_load((DEPLOY / "gateway.yaml").read_text(encoding="utf-8")), env)
    config = validate_data(data, GatewayConfig, "deploy/gateway.yaml")
    assert config.state.backend == "redis"
    assert config.state.url is not None
    assert config.state.url.get_secret_value() == "redis://redis:6379/0"
