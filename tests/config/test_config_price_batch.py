"""price.batch, price.windows and the tier a call is priced at (issue 41): the provider's batch price, cached
input in batch as each provider bills it, time-of-day windows in their timezone, errors naming the config path."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tailgate.config import ConfigError
from tailgate.config.resolve import load_resolved
from tailgate.config.schema import BatchPriceConfig, PriceConfig, PriceWindow

ROUTES = "models:\n  m:\n    routes:\n      - {provider: a, model: x}\n"
SHANGHAI = ZoneInfo("Asia/Shanghai")


def _at(hour: int, minute: int = 0, tz: ZoneInfo = SHANGHAI) -> float:
    return datetime(2026, 12, 7, hour, minute, tzinfo=tz).timestamp()


def _load(tmp_path: Path, providers: str) -> dict[str, PriceConfig]:
    path = tmp_path / "gateway.yaml"
    path.write_text("providers:\n" + providers + ROUTES, encoding="utf-8")
    _, resolved = load_resolved(path, env={})
    return {name: rp.price for name, rp in resolved.items()}


def _problems(tmp_path: Path, providers: str) -> list[str]:
    path = tmp_path / "gateway.yaml"
    path.write_text("providers:\n" + providers + ROUTES, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_resolved(path, env={})
    return list(exc.value.problems)


def test_an_off_peak_window_in_beijing_time_halves_every_rate_and_names_its_tier() -> None:
    """DeepSeek's off-peak discount as it sold it: 00:30-08:30 Beijing time, 50 % off."""
    price = PriceConfig(
        input=2.0,
        output=8.0,
        cached_input=0.2,
        windows=[PriceWindow(name="off-peak", start="00:30", end="08:30", timezone="Asia/Shanghai", ratio=0.5)],
    )
    peak = price.quote(1_000_000, 1_000_000, 500_000, at=_at(12))
    assert peak.tier == "standard"
    assert peak.cost == pytest.approx(0.5 * 2.0 + 0.5 * 0.2 + 8.0)
    off = price.quote(1_000_000, 1_000_000, 500_000, at=_at(3))
    assert off.tier == "off-peak"
    assert off.cost == pytest.approx(peak.cost / 2)
    # the edges: its start is in, its end is out; 00:29 Beijing is 16:29 UTC the day before
    assert price.quote(1, 1, at=_at(0, 30)).tier == "off-peak"
    assert price.quote(1, 1, at=_at(8, 30)).tier == "standard"
    assert price.quote(1, 1, at=_at(0, 29)).tier == "standard"
    assert price.quote(1, 1, at=_at(16, 30, ZoneInfo("UTC"))).tier == "off-peak"  # = 00:30 in Shanghai
    # the batch lane is a live call: it gets the window too; the standard cost is what cost() always said
    assert price.quote(1000, 10, lane="batch-lane", at=_at(3)).tier == "off-peak"
    assert price.cost(1000, 10, 100) == price.quote(1000, 10, 100, at=_at(12)).cost


def test_a_window_across_midnight_with_absolute_prices_and_a_surcharge() -> None:
    surcharge = PriceWindow(name="peak", start="09:00", end="12:00", timezone="Asia/Shanghai", ratio=2)
    night = PriceWindow(start="22:00", end="02:00", timezone="Asia/Shanghai", input=1.0, output=1.0)
    price = PriceConfig(input=2.0, output=8.0, windows=[surcharge, night])
    assert price.quote(1_000_000, 0, at=_at(10)) == (4.0, "peak")
    assert price.quote(1_000_000, 1_000_000, at=_at(23)) == (2.0, "22:00-02:00 Asia/Shanghai")
    assert price.quote(1_000_000, 1_000_000, at=_at(1, 59)).tier == "22:00-02:00 Asia/Shanghai"
    assert price.quote(1_000_000, 1_000_000, at=_at(2)).tier == "standard"
    # unset cached_input in a window with absolute prices: the standard cached rate x its ratio (1)
    assert price.rates(at=_at(23))[2] == 2.0


def test_the_provider_batch_price_and_cache_hits_in_batch() -> None:
    price = PriceConfig(input=2.0, output=8.0, cached_input=0.4, batch=BatchPriceConfig(ratio=0.5))
    # no batch cached_input: a hit in batch costs the batch input price (no cache discount, as Bailian bills)
    q = price.quote(1_000_000, 1_000_000, 1_000_000, lane="provider-batch")
    assert q == (0.5 * 2.0 + 0.5 * 8.0, "batch")
    # a provider that cuts hits further in batch: its batch cached_input
    ark = PriceConfig(input=2.0, output=8.0, batch=BatchPriceConfig(input=1.0, output=4.0, cached_input=0.2))
    assert ark.quote(1_000_000, 0, 1_000_000, lane="provider-batch").cost == pytest.approx(0.2)
    # the batch price does not touch live calls, nor the batch lane (the gateway's own, at live prices)
    assert price.quote(1_000_000, 0, lane="batch-lane").tier == "standard"
    assert PriceConfig(input=2.0).quote(1_000_000, 0, lane="provider-batch") == (2.0, "standard")


def test_the_bailian_preset_fills_the_batch_price_and_no_cache_discount_in_batch(tmp_path: Path) -> None:
    prices = _load(
        tmp_path,
        "  a: {preset: bailian, price: {input: 4.0, output: 12.0}}\n"
        "  b: {preset: bailian, price: {input: 4.0, output: 12.0, batch: {input: 1.5}}}\n"
        "  c: {base_url: 'http://127.0.0.1:9/v1', price: {input: 4.0, output: 12.0}}\n",
    )
    a = prices["a"]
    assert a.batch is not None
    assert (a.batch.ratio, a.batch.cached_input) == (0.5, 2.0)
    assert a.quote(1_000_000, 1_000_000, 1_000_000, lane="provider-batch") == (2.0 + 6.0, "batch")
    assert a.quote(1_000_000, 0, 1_000_000).cost == pytest.approx(0.8)  # live: a hit at 20 % of input
    b = prices["b"]
    assert b.rates(lane="provider-batch") == (1.5, 6.0, 1.5, "batch")
    assert prices["c"].batch is None


def test_bad_batch_and_window_config_is_refused_naming_its_path(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "  a: {base_url: 'http://127.0.0.1:9/v1', price: {input: 1, batch: {input: 0.5}}}\n")
    assert len(problems) == 1
    assert "providers.a.price.batch" in problems[0]
    assert "no output" in problems[0]
    assert "ratio" in problems[0]
    cases = {
        "{start: '25:00', end: '08:00', ratio: 0.5}": "start must be a time of day as HH:MM",
        "{start: '00:30', end: '08:30', timezone: 'Mars/Olympus', ratio: 0.5}": "unknown timezone 'Mars/Olympus'",
        "{start: '00:30', end: '08:30'}": "needs ratio",
        "{start: '08:30', end: '08:30', ratio: 0.5}": "a window needs a length",
        "{start: '00:30', end: '08:30', ratio: 0}": "greater than 0",
    }
    for window, message in cases.items():
        problems = _problems(tmp_path, f"  a: {{price: {{input: 1, windows: [{window}]}}}}\n")
        assert any("providers.a.price.windows[0]" in p and message in p for p in problems), (window, problems)
    problems = _problems(tmp_path, "  a: {price: {input: 1, batch: {input: 0.5, output: 1, cached_input: 0.9}}}\n")
    assert any("providers.a.price.batch" in p and "cached_input (0.9) is above input (0.5)" in p for p in problems)


def test_config_check_shows_the_batch_price_and_the_windows(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tailgate.cli import main

    path = tmp_path / "gateway.yaml"
    path.write_text(
        "providers:\n  a:\n    preset: bailian\n    api_keys: ['sk-a-0123456789']\n"
        "    price: {input: 4, output: 12, windows: [{name: off-peak, start: '00:30', end: '08:30', "
        "timezone: Asia/Shanghai, ratio: 0.5}]}\n" + ROUTES,
        encoding="utf-8",
    )
    out = CliRunner().invoke(main, ["config", "check", str(path)])
    assert out.exit_code == 0, out.output
    assert "batch 2 in (2 cached) / 6 out; off-peak: 00:30-08:30 Asia/Shanghai ×0.5" in out.output
