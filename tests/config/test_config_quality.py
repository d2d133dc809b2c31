"""``routing.quality`` and ``models.<alias>.quality`` (promise 8): defaults, the per-alias override, located errors,
and the routing settings the gateway builds from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailgate.config import ConfigError
from tailgate.config.resolve import load_resolved
from tailgate.config.schema import GatewayConfig
from tailgate.routing.quality import QualitySettings, settings_from

BASE = """\
providers:
  ds: {preset: deepseek, api_keys: ["sk-ds-0123456789"]}
  bl: {preset: bailian, api_keys: ["sk-bl-0123456789"]}
models:
  chat:
    routes:
      - {provider: ds, model: deepseek-chat, weight: 80}
      - {provider: bl, model: deepseek-v3.2, weight: 20}
  big:
    routes: [{provider: bl, model: deepseek-v3.2}]
"""


def _load(tmp_path: Path, text: str) -> GatewayConfig:
    path = tmp_path / "gateway.yaml"
    path.write_text(text, encoding="utf-8")
    return load_resolved(path, env={})[0]


def test_defaults_are_the_routing_defaults(tmp_path: Path) -> None:
    cfg = _load(tmp_path, BASE)
    q = cfg.routing.quality
    assert (q.enabled, q.window, q.recent, q.margin, q.traffic_margin, q.min_samples, q.signals) == (
        True,
        600.0,
        120.0,
        0.03,
        0.01,
        20,
        None,
    )
    assert settings_from(q.merged(cfg.models["chat"].quality)) == QualitySettings()


def test_an_alias_overrides_the_fields_it_gives(tmp_path: Path) -> None:
    text = BASE + "routing: {quality: {margin: 0.05, window: 15m}, adaptive: {slow_start: 30s}}\n"
    text = text.replace(
        "    routes: [{provider: bl",
        "    quality: {enabled: false, window: 60s, signals: [canary]}\n    routes: [{provider: bl",
    )
    cfg = _load(tmp_path, text)
    chat = settings_from(cfg.routing.quality.merged(cfg.models["chat"].quality), cfg.routing.adaptive.slow_start)
    assert (chat.enabled, chat.window_s, chat.margin, chat.slow_start_s) == (True, 900.0, 0.05, 30.0)
    big = settings_from(cfg.routing.quality.merged(cfg.models["big"].quality))
    assert (big.enabled, big.window_s, big.recent_s, big.margin, big.signals) == (
        False,
        60.0,
        60.0,  # routing.quality.recent (120 s) bounded by the alias's shorter window
        0.05,
        frozenset({"canary"}),
    )


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("routing: {quality: {margin: 1}}\n", "routing.quality.margin"),
        ("routing: {quality: {traffic_margin: -0.01}}\n", "routing.quality.traffic_margin"),
        ("routing: {quality: {min_samples: 0}}\n", "routing.quality.min_samples"),
        ("routing: {quality: {window: 0}}\n", "routing.quality.window"),
        ("routing: {quality: {recent: 20m}}\n", "routing.quality"),
        ("routing: {quality: {hysteresis: 2}}\n", "routing.quality.hysteresis"),
    ],
)
def test_errors_name_the_field(tmp_path: Path, extra: str, where: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, BASE + extra)
    assert any(where in p for p in exc.value.problems), exc.value.problems


def test_alias_override_errors_name_the_alias(tmp_path: Path) -> None:
    for bad, where in (("margin: 2", "models.big.quality.margin"), ("recent: 5m, window: 1m", "models.big.quality")):
        text = BASE.replace("    routes: [{provider: bl", f"    quality: {{{bad}}}\n    routes: [{{provider: bl")
        with pytest.raises(ConfigError) as exc:
            _load(tmp_path, text)
        assert any(where in p for p in exc.value.problems), exc.value.problems
    assert any("recent (300.0s) must be at most window (60.0s)" in p for p in exc.value.problems), exc.value.problems
