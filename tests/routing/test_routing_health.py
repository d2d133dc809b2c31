"""ProviderHealth windows, counters, probes and the in-flight count, with a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from tailgate.routing import HealthRegistry, ProviderHealth
from tailgate.routing.health import is_fault
from tailgate.stats.window import ROUTING_PRECISION
from tailgate.upstream.events import CallResult


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


PRECISION = 1 / (2 * ROUTING_PRECISION)


def ok(ttft: float = 100.0, e2e: float = 1000.0, tokens: int = 10) -> CallResult:
    return CallResult(200, None, 0.0, True, ttft_ms=ttft, e2e_ms=e2e, output_tokens=tokens)


def fail(cls: Any, status: int | None = 500) -> CallResult:
    return CallResult(status, cls, 0.0, True, e2e_ms=50.0)


def test_percentiles_error_rates_and_snapshot() -> None:
    clock = Clock()
    h = ProviderHealth("a", "m", clock=clock)
    for i in range(1, 101):
        h.begin()
        h.observe(ok(ttft=float(i), e2e=10.0 * i))
    for _ in range(10):
        h.begin()
        h.observe(fail("http_5xx"))
    h.observe(fail("rate_limited", 429))
    h.observe(fail("cancelled", None))
    # The routing windows keep latencies to ROUTING_PRECISION steps per power of two (within 0.4 %).
    assert h.p90_s("ttft") == pytest.approx(0.090, rel=PRECISION)
    assert h.p90_s("e2e") == pytest.approx(0.900, rel=PRECISION)
    assert h.p90_s("ttft", min_samples=1000) is None
    assert h.requests == 111  # cancelled does not count
    assert h.error_rate == pytest.approx(10 / 111)
    rates = h.error_rates()
    assert set(rates) == {"http_5xx", "rate_limited", "cancelled"}
    snap = h.snapshot()
    assert snap["ttft_ms"]["p50"] == pytest.approx(50.0, rel=PRECISION)
    assert snap["ttft_ms"]["p99"] == pytest.approx(99.0, rel=PRECISION)
    assert snap["http_429"] == 1
    assert snap["faults"] == 10
    assert snap["in_flight"] == 0
    # 9 tokens after the first in (e2e - ttft) ms each
    assert h.tokens_per_s is not None
    assert h.tokens_per_s > 0


def test_window_expires_after_60s() -> None:
    clock = Clock()
    h = ProviderHealth("a", "m", clock=clock)
    h.observe(ok())
    h.observe(fail("connect", None))
    clock.t += 61.0
    assert h.requests == 0
    assert h.error_rate == 0.0
    assert h.p90_s("ttft") is None


def test_probes_feed_windows_and_are_counted_apart() -> None:
    h = ProviderHealth("a", "m", clock=Clock())
    h.begin()
    h.observe(ok(ttft=200.0), probe=True)
    h.observe(fail("timeout_first_token", None), probe=True)
    snap = h.snapshot()
    assert snap["probes"] == 2
    assert snap["probe_faults"] == 1
    assert snap["ttft_ms"]["count"] == 1
    assert h.in_flight == 1  # probes are not client traffic


def test_peak_estimates_and_fault_penalty() -> None:
    clock = Clock()
    h = ProviderHealth("a", "m", clock=clock)
    assert h.latency_estimate_ms("ttft") == 250.0
    h.observe(ok(ttft=100.0))
    assert h.latency_estimate_ms("ttft") == pytest.approx(100.0)
    h.observe(fail("connect", None))
    assert h.latency_estimate_ms("ttft") >= 2000.0  # a fast failure never looks fast


def test_registry_and_fault_classes() -> None:
    reg = HealthRegistry(clock=Clock())
    assert reg.get("a", "m") is reg.get("a", "m")
    assert reg.get("a", "m") is not reg.get("a", "n")
    assert len(reg.snapshot()) == 2
    assert is_fault("http_5xx")
    assert not is_fault("http_4xx")
    assert not is_fault(None)


def test_forget_drops_windows_and_estimates_but_keeps_waits() -> None:
    """forget() (a breaker closing after an outage): no faults, no samples, no estimate; in-flight stays."""
    from tailgate.routing import HealthRegistry
    from tailgate.upstream.events import CallResult

    t = [100.0]
    health = HealthRegistry(clock=lambda: t[0])
    h = health.get("p", "m")
    for _ in range(10):
        h.observe(CallResult(None, "http_5xx", 0.0, True, e2e_ms=5.0))
    handle = h.begin(stream=True)
    h.begin(stream=True)
    t[0] += 4.0
    assert h.error_rate == 1.0
    assert h.latency_estimate_ms("ttft") >= 2000.0
    h.forget()
    assert (h.requests, h.error_rate, h.p90_s("ttft")) == (0, 0.0, None)
    assert h.latency_estimate_ms("ttft", default_ms=250.0) == 250.0
    assert h.in_flight == 2
    assert h.stalled_s(True) == 4.0
    h.first_token(handle)
    assert h.stalled_s(True) is None


def test_a_non_streamed_answer_is_not_a_ttft() -> None:
    """A non-streamed call's "first token" is its whole answer: it feeds the E2E window, not the TTFT one (a
    batch route answering in 2 s must not look over a 1.5 s TTFT SLO)."""
    t = [1000.0]
    h = HealthRegistry(clock=lambda: t[0]).get("p", "m")
    for _ in range(20):
        h.observe(CallResult(200, None, 0.0, False, ttft_ms=2000.0, e2e_ms=2000.0, output_tokens=100))
        h.observe(CallResult(200, None, 0.0, True, ttft_ms=400.0, e2e_ms=1500.0, output_tokens=64))
    assert h.p90_s("ttft") == pytest.approx(0.4, rel=0.05)
    assert h.p90_s("e2e") == pytest.approx(2.0, rel=0.05)


def test_a_non_streamed_answer_gives_no_tokens_per_s() -> None:
    """A non-streamed body arrives whole (E2E − TTFT ≈ 0.05 ms, booked as 1 ms): only streamed calls give the
    window's tok/s, so a batch route's 127 tokens in "1 ms" cannot read 127,000 tok/s."""
    h = HealthRegistry(clock=lambda: 1000.0).get("p", "m")
    h.observe(CallResult(200, None, 0.0, False, ttft_ms=1999.95, e2e_ms=2000.0, output_tokens=128))
    assert h.tokens_per_s is None
    h.observe(CallResult(200, None, 0.0, True, ttft_ms=400.0, e2e_ms=1400.0, output_tokens=101))
    assert h.tokens_per_s == pytest.approx(100.0)
    assert h.snapshot()["tokens_per_s"] == pytest.approx(100.0)
