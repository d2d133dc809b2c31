"""A key's admission plan (its claims, budgets and slot, worked out once per key and UTC day) follows the
calendar and the key's limits: a new UTC day starts new budget counters, changed limits apply to the next
request, and a refusal still says when the budget resets. Real ``LocalState``, a clock we move."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from tailgate.gateway.access.key_directory import KeyDirectory, KeyLimits
from tailgate.gateway.request_path.admission import KeyAdmission, KeyRefused, budget_refusal, duration_words
from tailgate.ledger.usage import day_start
from tailgate.state import LocalState

JUST_BEFORE_MIDNIGHT = datetime(2026, 12, 3, 23, 59, 30, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _admission(limits: dict[str, KeyLimits], clock: Clock, state: LocalState) -> KeyAdmission:
    directory = KeyDirectory(None, [])
    directory.limits = lambda key_id: limits.get(key_id)  # type: ignore[method-assign]
    return KeyAdmission(directory, lambda: state, CollectorRegistry(), clock=clock)


def _daily(state: LocalState, t: float) -> float:
    return asyncio.run(state.usage(f"key:team:budget:tokens:daily:{int(day_start(t))}", None))


def test_a_new_utc_day_starts_new_budget_counters_and_the_refusal_says_when_it_resets() -> None:
    clock = Clock(JUST_BEFORE_MIDNIGHT)
    state = LocalState()
    limits = {"team": KeyLimits("team", tokens_per_day=100, max_concurrency=10)}
    admission = _admission(limits, clock, state)

    async def run() -> None:
        first = await admission.admit("team", "chat", 40, 40, (1.0, 1.0))
        assert first is not None
        admission.settle(first, 40, 40, 0.0)
        with pytest.raises(KeyRefused) as refused:  # 80 of 100 spent: 80 more do not fit today
            await admission.admit("team", "chat", 40, 40, (1.0, 1.0))
        assert refused.value.error.code == "budget_exceeded"
        assert refused.value.error.headers == {"Retry-After": "30"}  # midnight is 30 s away
        assert refused.value.error.message == (
            "The daily budget of this key cannot cover this request: it reserves 80 tokens (prompt + max_tokens), "
            "and 20 of 100 tokens are left. It resets at 00:00 UTC, in 30 s."
        )
        clock.t += 31.0  # past midnight: a new day's counter, from zero
        second = await admission.admit("team", "chat", 40, 40, (1.0, 1.0))
        assert second is not None
        admission.settle(second, 40, 40, 0.0)

    asyncio.run(run())
    assert _daily(state, JUST_BEFORE_MIDNIGHT) == 80
    assert _daily(state, JUST_BEFORE_MIDNIGHT + 31.0) == 80
    assert not state._gauges.get("key:team:concurrency")  # every slot given back


def test_changed_limits_apply_to_the_next_request() -> None:
    clock = Clock(JUST_BEFORE_MIDNIGHT - 3600)
    state = LocalState()
    limits = {"team": KeyLimits("team", tpm=1000)}
    admission = _admission(limits, clock, state)

    async def run() -> None:
        ticket = await admission.admit("team", "chat", 300, 300, (1.0, 1.0))
        assert ticket is not None
        assert ticket.lease is None
        limits["team"] = KeyLimits("team", tpm=1000, max_concurrency=1)  # what a key update or reload does
        held = await admission.admit("team", "chat", 10, 10, (1.0, 1.0))
        assert held is not None
        assert held.lease is not None
        with pytest.raises(KeyRefused) as refused:
            await admission.admit("team", "chat", 10, 10, (1.0, 1.0))
        assert refused.value.error.code == "concurrency_limit_exceeded"
        admission.settle(held, 10, 10, 0.0)
        limits["team"] = KeyLimits("team", tpm=100)  # lowered below what is already used this minute
        with pytest.raises(KeyRefused) as refused:
            await admission.admit("team", "chat", 10, 10, (1.0, 1.0))
        assert refused.value.error.code == "rate_limit_exceeded"

    asyncio.run(run())


def test_the_budget_refusal_says_what_is_true_in_words() -> None:
    """Not "exhausted" beside "434 of 2000 are left", nor "resets in 27210s": the reservation that does not fit,
    what is left, and when the budget resets as a time and a wait; a spent budget says so."""
    ends = datetime(2026, 12, 4, tzinfo=UTC).timestamp()
    assert budget_refusal("daily", "tokens", 1200.0, 434.0, 2000.0, ends, 27210.0) == (
        "The daily budget of this key cannot cover this request: it reserves 1200 tokens (prompt + max_tokens), "
        "and 434 of 2000 tokens are left. It resets at 00:00 UTC, in 7 h 34 min."
    )
    assert budget_refusal("daily", "tokens", 1200.0, -3.0, 2000.0, ends, 59.0) == (
        "The daily budget of this key is used up (0 of 2000 tokens left). It resets at 00:00 UTC, in 59 s."
    )
    month_end = datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    assert budget_refusal("monthly", "cost", 0.0125, 0.01, 5.0, month_end, 2_100_000.0) == (
        "The monthly budget of this key cannot cover this request: it reserves up to 0.0125 of spend "
        "(prompt + max_tokens at the dearest route's price), and 0.01 of 5 are left. "
        "It resets at 00:00 UTC on 2027-01-01, in 24 d 7 h."
    )
    assert [duration_words(s) for s in (0.2, 90.0, 3600.0, 86400.0)] == ["1 s", "2 min", "1 h 0 min", "1 d 0 h"]
