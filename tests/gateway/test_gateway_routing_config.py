"""Routing config as the gateway applies it: defaults, per-alias policy / SLO / hedge, pacers from limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.config.loader import ConfigError, validate_data
from tailgate.config.schema import GatewayConfig
from tailgate.routing import AdaptivePolicy

GwFactory = Callable[..., Awaitable[GatewayHandle]]
ADMIN = {"Authorization": "Bearer admin-key-0123456789"}


def _cfg(**extra: Any) -> GatewayConfig:
    return validate_data(
        two_provider_config("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", **extra), GatewayConfig, "test"
    )


def test_defaults() -> None:
    """adaptive is the default policy; probes and pacing are on with the documented numbers; no hedging."""
    r = _cfg().routing
    assert r.policy == "adaptive"
    assert r.hedge is None
    assert (r.probes.enabled, r.probes.interval, r.probes.jitter, r.probes.timeout, r.probes.max_tokens) == (
        True,
        10.0,
        0.2,
        10.0,
        8,
    )
    assert (r.pacing.enabled, r.pacing.headroom, r.pacing.burst, r.pacing.max_pause) == (True, 0.9, 1.0, 300.0)
    assert r.pacing.default_max_tokens == 256
    assert r.window == 60.0
    assert (r.breaker.cooldown, r.breaker.max_cooldown, r.breaker.consecutive_failures) == (5.0, 10.0, 5)


def test_alias_overrides_and_errors() -> None:
    """An alias may set its own policy, SLO and hedge; units parse; unknown keys are errors."""
    cfg = _cfg(routing={"hedge": {"after": "1.5s", "budget": "2%"}, "probes": {"interval": "30s"}})
    assert cfg.routing.hedge is not None
    assert cfg.routing.hedge.after == 1.5
    assert cfg.routing.hedge.budget == pytest.approx(0.02)
    data = two_provider_config("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    model = data["models"]["deepseek-v3.2"]
    model.update(policy="weighted", slo={"ttft_p90": "200ms"}, hedge={"after": "p99"})
    cfg = validate_data(data, GatewayConfig, "test")
    m = cfg.models["deepseek-v3.2"]
    assert m.policy == "weighted"
    assert m.slo is not None
    assert m.slo.ttft_p90 == pytest.approx(0.2)
    assert m.hedge is not None
    assert m.hedge.after == "p99"
    with pytest.raises(ConfigError, match=r"routing\.probes\.intervall"):
        _cfg(routing={"probes": {"intervall": "1s"}})
    with pytest.raises(ConfigError, match=r"routing\.pacing\.headroom"):
        _cfg(routing={"pacing": {"headroom": 1.5}})
    with pytest.raises(ConfigError, match=r"max_cooldown must be at least cooldown"):
        _cfg(routing={"breaker": {"cooldown": "10s", "max_cooldown": "5s"}})


async def test_gateway_applies_alias_settings(sim: SimFactory, gateway: GwFactory) -> None:
    """The alias's policy and SLO win field by field; pacers come from limits; admin shows all of it."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    config = two_provider_config(
        a.url,
        b.url,
        admin_key="admin-key-0123456789",
        routing={
            "slo": {"ttft_p90": "2s", "e2e_p90": "9s"},
            "probes": {"enabled": False},
            "window": "20s",
            "adaptive": {"floor": 0.05, "smoothing_down": "500ms"},
            "breaker": {"cooldown": "1s"},
        },
    )
    config["models"]["deepseek-v3.2"]["slo"] = {"ttft_p90": "500ms"}
    config["models"]["deepseek-v3.2"]["hedge"] = {"after": "p95", "budget": "10%"}
    config["models"]["plain"] = {"policy": "weighted", "routes": [{"provider": "secondary", "model": "s"}]}
    config["providers"]["primary"]["limits"] = {"rpm": 600, "tpm": 100_000}
    gw = await gateway(config)
    g = gw.gateway
    assert g.slo_for("deepseek-v3.2").ttft_p90 == 0.5
    assert g.slo_for("deepseek-v3.2").e2e_p90 == 9.0
    assert g.slo_for("plain").ttft_p90 == 2.0
    assert g.policy_for("deepseek-v3.2").name == "adaptive"
    assert g.policy_for("plain").name == "weighted"
    assert set(g.hedgers) == {"deepseek-v3.2"}
    assert g.breakers.get("primary").config.cooldown_s == 1.0
    adaptive = g.policy_for("deepseek-v3.2")
    assert isinstance(adaptive, AdaptivePolicy)
    assert (adaptive.floor, adaptive.smoothing_down_tau_s, adaptive.slow_start_s) == (0.05, 0.5, 15.0)
    assert g.health.get("primary", "up-primary").e2e.width_s == 20.0
    assert g.providers["primary"].pacer.limited
    assert not g.providers["secondary"].pacer.limited
    async with aiohttp.ClientSession() as session, session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
        admin = await r.json()
    alias = admin["routing"]["deepseek-v3.2"]
    assert alias["slo"] == {"ttft_p90_s": 0.5, "e2e_p90_s": 9.0}
    assert alias["hedge"]["after"] == "p95"
    assert alias["weights"]["primary"]["reason"] == "within slo: configured 80%"
    assert alias["weights"]["primary"]["evidence"] == "no samples yet (prior 1.0)"
    assert admin["routing"]["plain"]["weights"]["secondary"]["reason"] == "static weights (policy weighted)"
    primary = next(p for p in admin["providers"] if p["name"] == "primary")
    assert primary["pacer"]["rpm"] == {"limit": 600, "paced_at": 540.0, "available": 9.0}
    assert primary["pacer"]["tpm"]["paced_at"] == 90_000
    assert set(primary["models"]) == {"up-primary"}
    assert primary["effective_weights"]["deepseek-v3.2"]["configured_weight"] == 80
    secondary = next(p for p in admin["providers"] if p["name"] == "secondary")
    assert set(secondary["models"]) == {"up-secondary", "s"}
    assert "sk-primary" not in str(admin)
