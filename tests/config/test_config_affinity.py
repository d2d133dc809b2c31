"""``routing.affinity`` and ``models.<alias>.affinity``: defaults, the per-alias override, located errors; the
providers' ``cache_min_tokens`` from presets; the alias's resolved settings (its smallest cache minimum)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailgate.config import ConfigError
from tailgate.config.resolve import ResolvedProvider, load_resolved
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.request_path.providers import provider_state
from tailgate.gateway.request_path.routes import affinity_settings

BASE = """\
providers:
  ds: {preset: deepseek, api_keys: ["sk-ds-0123456789"]}
  bl: {preset: bailian, api_keys: ["sk-bl-0123456789"]}
  local: {base_url: "http://127.0.0.1:8000/v1"}
models:
  chat:
    routes:
      - {provider: ds, model: deepseek-chat, weight: 80}
      - {provider: bl, model: deepseek-v3.2, weight: 20}
  big:
    routes: [{provider: bl, model: deepseek-v3.2}]
"""


def _load(tmp_path: Path, text: str) -> tuple[GatewayConfig, dict[str, ResolvedProvider]]:
    path = tmp_path / "gateway.yaml"
    path.write_text(text, encoding="utf-8")
    return load_resolved(path, env={})


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, text)
    return exc.value.problems


def test_defaults_override_and_cache_minimums(tmp_path: Path) -> None:
    text = BASE + "routing: {affinity: {epsilon: 0.2}}\n"
    text = text.replace(
        "    routes: [{provider: bl", "    affinity: {sources: [header], window: 50}\n    routes: [{provider: bl"
    )
    cfg, providers = _load(tmp_path, text)
    states = {n: provider_state(p, cfg.routing.pacing) for n, p in providers.items()}
    assert {n: p.cache_min_tokens for n, p in providers.items()} == {"ds": 64, "bl": 256, "local": 64}
    chat = affinity_settings(cfg, "chat", states)
    assert (chat.enabled, chat.sources, chat.prefix_chars, chat.epsilon, chat.window, chat.min_tokens) == (
        True,
        ("header", "prompt_cache_key", "user", "prefix"),
        512,
        0.2,
        1000,
        64.0,  # the smaller of 64 (DeepSeek) and 256 (Bailian)
    )
    big = affinity_settings(cfg, "big", states)
    assert (big.sources, big.window, big.epsilon, big.min_tokens) == (("header",), 50, 0.2, 256.0)


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("routing: {affinity: {sources: []}}\n", "routing.affinity.sources"),
        ("routing: {affinity: {sources: [header, header]}}\n", "routing.affinity.sources"),
        ("routing: {affinity: {sources: [cookie]}}\n", "routing.affinity.sources[0]"),
        ("routing: {affinity: {epsilon: 0}}\n", "routing.affinity.epsilon"),
        ("routing: {affinity: {window: 2}}\n", "routing.affinity.window"),
        ("routing: {affinity: {prefix_chars: 8}}\n", "routing.affinity.prefix_chars"),
        ("routing: {affinity: {sticky: true}}\n", "routing.affinity.sticky"),
    ],
)
def test_errors_name_the_field(tmp_path: Path, extra: str, where: str) -> None:
    problems = _problems(tmp_path, BASE + extra)
    assert any(where in p for p in problems), problems


def test_alias_override_errors_name_the_alias(tmp_path: Path) -> None:
    text = BASE.replace("    routes: [{provider: bl", "    affinity: {epsilon: 1.5}\n    routes: [{provider: bl")
    problems = _problems(tmp_path, text)
    assert any("models.big.affinity.epsilon" in p for p in problems), problems
    text = BASE.replace(
        "  local: {base_url", "  neg: {base_url: 'http://127.0.0.1:9/v1', cache_min_tokens: -1}\n  local: {base_url"
    )
    problems = _problems(tmp_path, text)
    assert any("providers.neg.cache_min_tokens" in p for p in problems), problems
