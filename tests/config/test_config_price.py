"""price.cached_input: cached prompt tokens priced apart, preset shares where providers publish them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailgate.config import ConfigError
from tailgate.config.presets import PRESETS
from tailgate.config.resolve import load_resolved
from tailgate.config.schema import PriceConfig

ROUTES = "models:\n  m:\n    routes:\n      - {provider: a, model: x}\n"


def _load(tmp_path: Path, providers: str) -> dict[str, PriceConfig]:
    path = tmp_path / "gateway.yaml"
    path.write_text("providers:\n" + providers + ROUTES, encoding="utf-8")
    _, resolved = load_resolved(path, env={})
    return {name: rp.price for name, rp in resolved.items()}


def test_cached_tokens_cost_cached_input_and_the_rest_input() -> None:
    """1,000 prompt tokens of which 800 cached at ¥0.2/M, 200 at ¥2/M, 100 output at ¥3/M."""
    price = PriceConfig(input=2.0, output=3.0, cached_input=0.2)
    assert price.input_cost(1000, 800) == pytest.approx((200 * 2.0 + 800 * 0.2) / 1e6)
    assert price.cost(1000, 100, 800) == pytest.approx((200 * 2.0 + 800 * 0.2 + 100 * 3.0) / 1e6)
    assert price.cost(1000, 100, 0) == pytest.approx((1000 * 2.0 + 100 * 3.0) / 1e6)


def test_without_cached_input_or_cached_tokens_everything_is_input() -> None:
    """No cached_input: a cached token costs input. The provider did not say (None): the whole prompt is input."""
    assert PriceConfig(input=2.0).input_cost(1000, 800) == pytest.approx(1000 * 2.0 / 1e6)
    assert PriceConfig(input=2.0, cached_input=0.2).input_cost(1000, None) == pytest.approx(1000 * 2.0 / 1e6)
    assert PriceConfig(input=2.0, cached_input=0.2).input_cost(None, None) == 0.0


def test_odd_usage_is_clamped() -> None:
    """More cached than prompt tokens, or negative counts, never give a negative or inflated cost."""
    price = PriceConfig(input=2.0, cached_input=0.2)
    assert price.input_cost(100, 500) == pytest.approx(100 * 0.2 / 1e6)
    assert price.input_cost(100, -5) == pytest.approx(100 * 2.0 / 1e6)
    assert price.cost(-1, -1, -1) == 0.0


def test_preset_share_fills_cached_input_and_the_user_wins(tmp_path: Path) -> None:
    """deepseek (10 %) and bailian (20 %) derive cached_input from input; a user's cached_input wins."""
    prices = _load(
        tmp_path,
        "  a: {preset: deepseek, price: {input: 2.0, output: 3.0}}\n"
        "  b: {preset: bailian, price: {input: 2.0}}\n"
        "  c: {preset: bailian, price: {input: 2.0, cached_input: 0.5}}\n"
        "  d: {preset: lanyun, price: {input: 2.0}}\n"
        "  e: {preset: deepseek}\n"
        "  f: {base_url: 'http://127.0.0.1:9/v1', price: {input: 1.0}}\n",
    )
    assert prices["a"].cached_input == pytest.approx(0.2)
    assert prices["b"].cached_input == pytest.approx(0.4)
    assert prices["c"].cached_input == 0.5
    assert prices["d"].cached_input is None, "Lanyun publishes no exact share"
    assert prices["e"].cached_input is None, "no input price, nothing to take a share of"
    assert prices["f"].cached_input is None
    assert prices["d"].cached_rate == 2.0


def test_cached_input_above_input_is_refused_with_its_path(tmp_path: Path) -> None:
    """A cache hit dearer than a miss is a typo: the error names the provider's price."""
    path = tmp_path / "gateway.yaml"
    path.write_text("providers:\n  a: {price: {input: 0.2, cached_input: 2.0}}\n" + ROUTES, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_resolved(path, env={})
    assert len(exc.value.problems) == 1
    assert "providers.a.price" in exc.value.problems[0]
    assert "cached_input (2) is above input (0.2)" in exc.value.problems[0]


def test_every_preset_share_has_a_source() -> None:
    """A preset share is a published fact: each one is a fraction and its preset lists its pricing source."""
    shares = {name: p for name, p in PRESETS.items() if p.cached_input_ratio is not None}
    assert set(shares) == {"deepseek", "bailian"}
    for p in shares.values():
        assert p.cached_input_ratio is not None
        assert 0 < p.cached_input_ratio < 1
        assert any("pricing" in s or "context-cache" in s for s in p.sources), p.name
