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
    assert "server gateway:8080 resolve" in (DEPLOY / "nginx" / "tailgate-compose.conf").read_text(encoding="utf-8")
    assert set(compose["services"]) >= {"gateway", "lb", "redis", "postgres", "prometheus"}
    env = {"TG_CLIENT_KEY": "tg-client-key-0123", "TG_ADMIN_KEY": "admin-key-0123456789", "LANYUN_KEY": "sk-l"}
    env |= {"BAILIAN_KEY": "sk-b", "PGPASSWORD": "pw"}
    from tailgate.config.loader import interpolate

    data = interpolate(yaml.safe_load((DEPLOY / "gateway.yaml").read_text(encoding="utf-8")), env)
    config = validate_data(data, GatewayConfig, "deploy/gateway.yaml")
    assert config.state.backend == "redis"
    assert config.state.url is not None
    assert config.state.url.get_secret_value() == "redis://redis:6379/0"
    assert config.ledger.url == "postgresql://tailgate:pw@postgres:5432/tailgate"


def _env_refs(text: str) -> set[str]:
    """Variables a file references without a default (``${VAR}``, not ``${VAR:-x}``)."""
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text))


def test_env_example_names_every_variable_the_gateway_config_needs() -> None:
    """deploy/.env.example sets every ${VAR} of deploy/gateway.yaml that has no default, and the compose
    file's own ${PGPASSWORD}: a copied .env is complete but for the secrets' values."""
    example = (DEPLOY / ".env.example").read_text(encoding="utf-8")
    defined = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    needed = _env_refs((DEPLOY / "gateway.yaml").read_text(encoding="utf-8"))
    needed |= {"PGPASSWORD"}
    assert needed <= defined, f"missing from .env.example: {sorted(needed - defined)}"


def test_both_load_balancers_proxy_alike() -> None:
    """The Compose and VM nginx files each define the upstream ``tailgate`` and include the one proxy file
    (retries included), and the systemd unit's replicas are the VM upstream's servers and Prometheus's targets."""
    proxy = (DEPLOY / "nginx" / "tailgate-proxy.inc").read_text(encoding="utf-8")
    assert "proxy_pass http://tailgate;" in proxy
    assert re.search(r"^\s*proxy_next_upstream error timeout non_idempotent;", proxy, flags=re.MULTILINE)
    for name in ("tailgate-compose.conf", "tailgate-vm.conf"):
        text = (DEPLOY / "nginx" / name).read_text(encoding="utf-8")
        assert "upstream tailgate {" in text
        assert "include /etc/nginx/tailgate-proxy.inc;" in text
        assert "$http_x_request_id" in text
    vm = (DEPLOY / "nginx" / "tailgate-vm.conf").read_text(encoding="utf-8")
    servers = re.findall(r"^\s*server (127\.0\.0\.1:\d+) ", vm, flags=re.MULTILINE)
    prom = yaml.safe_load((DEPLOY / "systemd" / "prometheus.yml").read_text(encoding="utf-8"))
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == servers
    unit = (DEPLOY / "systemd" / "tailgate@.service").read_text(encoding="utf-8")
    assert "--port %i" in unit
    assert "TAILGATE_DB=/var/lib/tailgate/%i/" in unit  # one spool per replica, never shared
    compose = (DEPLOY / "compose.yaml").read_text(encoding="utf-8")
    for mounted in ("./nginx/tailgate-compose.conf:", "./nginx/tailgate-proxy.inc:/etc/nginx/tailgate-proxy.inc"):
        assert mounted in compose


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    """The provisioned data source is the uid the dashboard's panels use, and the dashboards folder is where
    the compose file mounts the JSON."""
    source = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    folder = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "tailgate.yaml").read_text())
    dashboard = (DEPLOY / "grafana" / "tailgate-dashboard.json").read_text(encoding="utf-8")
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    assert source["datasources"][0]["type"] == "prometheus"
    assert '"type": "prometheus"' in dashboard
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    mounts = compose["services"]["grafana"]["volumes"]
    assert any(m.endswith(folder["providers"][0]["options"]["path"] + "/tailgate-dashboard.json:ro") for m in mounts)


def _components(section: dict[str, Any]) -> set[str]:
    """A collector config section's component ids (``otlp``, ``otlp/traces``: type and optional name)."""
    return set(section or {})


def test_otel_collector_config_wires_every_pipeline_and_matches_compose_and_systemd() -> None:
    """deploy/otel-collector.yaml (no collector binary on the build machine: checked for structure): every
    pipeline names only components the file defines, of types the contrib image ships; the OTLP receiver
    listens where the replicas are told to export (.env.example, the Compose service's exposed ports, the
    systemd unit's comment), and Compose and systemd run it with the file at the path their command reads."""
    cfg = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text(encoding="utf-8"))
    assert set(cfg) <= {"receivers", "processors", "exporters", "extensions", "connectors", "service"}
    shipped = {
        "receivers": {"otlp"},
        "processors": {"batch", "memory_limiter"},
        "exporters": {"otlp", "otlphttp", "prometheus", "debug"},
        "extensions": {"health_check"},
    }
    for kind, types in shipped.items():
        for component in _components(cfg.get(kind, {})):
            assert component.split("/", 1)[0] in types, f"{kind}: unknown component type {component!r}"
    assert set(cfg["service"]["extensions"]) <= _components(cfg["extensions"])
    pipelines = cfg["service"]["pipelines"]
    assert set(pipelines) == {"traces", "metrics"}
    for name, pipe in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            used = set(pipe.get(kind, []))
            assert used, f"pipeline {name} has no {kind}"
            assert used <= _components(cfg[kind]), f"pipeline {name}: {kind} {sorted(used - set(cfg[kind]))} undefined"
        assert pipe["processors"][0] == "memory_limiter"  # first, as the collector's docs require
    otlp = cfg["receivers"]["otlp"]["protocols"]
    assert otlp["grpc"]["endpoint"].endswith(":4317")
    assert otlp["http"]["endpoint"].endswith(":4318")
    assert cfg["exporters"]["otlp/traces"]["endpoint"] == "${env:TRACES_ENDPOINT:-jaeger:4317}"

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    service = compose["services"]["otel-collector"]
    assert service["profiles"] == ["otel"]
    assert compose["services"]["jaeger"]["profiles"] == ["otel"]
    config_arg = next(a for a in service["command"] if a.startswith("--config="))
    assert f"./otel-collector.yaml:{config_arg.removeprefix('--config=')}:ro" in service["volumes"]
    assert {"4317", "4318"} <= set(service["expose"])
    example = (DEPLOY / ".env.example").read_text(encoding="utf-8")
    assert re.search(r"^# OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318$", example, flags=re.MULTILINE)
    unit = (DEPLOY / "systemd" / "tailgate-otelcol.service").read_text(encoding="utf-8")
    assert "--config=/etc/tailgate/otel-collector.yaml" in unit
    assert "install -m 0644 deploy/otel-collector.yaml /etc/tailgate/otel-collector.yaml" in unit
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318" in unit
