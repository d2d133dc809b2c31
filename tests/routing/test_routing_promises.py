"""The adaptive router's six promises (docs/routing.md), each tested on a fake clock with simulated load."""

from __future__ import annotations

import random
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
from fakeload import Clock, FakeLoad, Sent, share

from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import recent_priors
from tailgate.ledger.samples import Sample, insert_samples
from tailgate.routing import SLO, AdaptivePolicy, BreakerConfig, BreakerRegistry, HealthRegistry, Route
from tailgate.routing.promises import (
    SmoothSplit,
    configured_split,
    even_split,
    far_at_first_token,
    first_token_view,
    readmit_evidence,
    slow_start,
)

A = Route("m", "a", "ma", 60)
B = Route("m", "b", "mb", 30, frozenset({"batch"}))
C = Route("m", "c", "mc", 10, frozenset({"batch"}))
SLO_1S = SLO(1.0, 3.0)


def setup(
    routes: list[Route], *, breakers: bool = False, probes: float | None = None, **kw: float
) -> tuple[AdaptivePolicy, FakeLoad]:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    reg = BreakerRegistry(BreakerConfig(jitter=0.0), clock=clock, rng=random.Random(0)) if breakers else None
    policy = AdaptivePolicy(health, breakers=reg, slo=SLO_1S, clock=clock, rng=random.Random(1), **kw)  # type: ignore[arg-type]
    return policy, FakeLoad(policy, health, clock, routes, breakers=reg, probe_interval=probes)


def by_class(sent: list[Sent]) -> dict[str | None, Counter[str]]:
    out: dict[str | None, Counter[str]] = {}
    for s in sent:
        out.setdefault(s.traffic_class, Counter())[s.provider] += 1
    return out


def time_below(sent: list[Sent], provider: str, since: float, limit: float) -> float | None:
    """Seconds from ``since`` to the first 1 s window from which ``provider``'s share stays below ``limit``."""
    end = max(s.t for s in sent)
    t = since
    while t + 1.0 <= end:
        windows = [share(sent, provider, lo, lo + 1.0) for lo in _steps(t, end)]
        if all(w < limit for w in windows):
            return t - since
        t += 0.1
    return None


def _steps(t: float, end: float) -> list[float]:
    out = []
    while t + 1.0 <= end:
        out.append(t)
        t += 0.5
    return out


# -- promise 1: a route that meets its SLO keeps its configured share ------------------------------


def test_within_slo_every_class_mix_gets_exactly_the_configured_split() -> None:
    """Routes of different speeds, all within the SLO: untagged and interactive split 60/30/10 by the
    route weights, batch 75/25 over the routes that list it — exactly, not fastest-first."""
    policy, load = setup([A, B, C])
    load.ttft = {"a": 0.6, "b": 0.2, "c": 0.1}  # a is the slowest, still within the 1 s SLO
    sent = load.run(120, 25, [None, "interactive", "batch", "interactive", None])
    # The numbers of the configuration itself, written out (not computed by routing/promises.py): weights
    # 60/30/10 for every class no route reserves; batch listed by b (30) and c (10) only, so 75/25 and a none.
    expected = {None: (0.60, 0.30, 0.10), "interactive": (0.60, 0.30, 0.10), "batch": (0.0, 0.75, 0.25)}
    counts_by_class = by_class(sent)
    assert set(counts_by_class) == set(expected)
    for cls, counts in counts_by_class.items():
        n = sum(counts.values())
        assert n >= 600
        for r, want in zip((A, B, C), expected[cls], strict=True):
            assert abs(counts[r.provider] / n - want) <= 0.005, (cls, counts)  # within one request of the split
    exp = policy.explain([A, B, C])
    assert {e["promise"] for e in exp.values()} == {"configured-split"}
    assert exp["a"]["reason"] == "within slo: configured 60%"
    assert exp["b"]["effective_weight"] == 30


def test_configured_split_is_the_configured_weights_as_literal_shares() -> None:
    """configured_split gives 60/30/10 for untagged and interactive traffic, 75/25 for batch (listed by b and c),
    0 for a weight-0 fallback route and for a route that does not list a reserved class."""
    assert configured_split([A, B, C], None) == {A: 0.6, B: 0.3, C: 0.1}
    assert configured_split([A, B, C], "interactive") == {A: 0.6, B: 0.3, C: 0.1}
    assert configured_split([A, B, C], "batch") == {A: 0.0, B: 0.75, C: 0.25}
    fallback = Route("m", "d", "md", 0)
    assert configured_split([A, fallback], None) == {A: 1.0, fallback: 0.0}


def test_weight_moves_only_off_the_route_that_misses_its_slo() -> None:
    """A's P90 1.3× over its SLO (its median within it) loses weight in proportion; the routes that meet
    it keep their configured weights."""
    policy, load = setup([A, B, C])
    load.ttft = {"a": [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.3, 1.3], "b": 0.2, "c": 0.2}  # P90 1.3 s
    load.run(30, 20)
    exp = policy.explain([A, B, C])
    assert exp["a"]["promise"] == "over-slo"
    assert 0.2 * 60 < exp["a"]["effective_weight"] < 0.5 * 60  # (1 / 1.3) ** 4 ≈ 0.35
    assert "instead of the configured 60%" in exp["a"]["reason"]
    assert (exp["b"]["effective_weight"], exp["c"]["effective_weight"]) == (30, 10)
    assert exp["b"]["promise"] == exp["c"]["promise"] == "configured-split"


def test_smooth_split_is_exact_over_any_prefix() -> None:
    split = SmoothSplit()
    picks = [split.pick("g", [("a", 80.0), ("b", 20.0)]) for _ in range(1000)]
    for n in range(5, 1001, 5):
        assert picks[:n].count(0) == n * 4 // 5
    assert split.pick("g", [("a", 0.0)]) is None
    for i in range(SmoothSplit.MAX_GROUPS + 100):  # classes come from a client header: memory stays bounded
        split.pick(f"class-{i}", [("a", 1.0)], overflow="shared")
    assert len(split._credit) == SmoothSplit.MAX_GROUPS + 1


# -- promise 2: no client request explores ---------------------------------------------------------


def test_a_far_over_route_gets_no_client_request_while_a_healthy_one_exists() -> None:
    """A at 5× the SLO: after the first-token evidence, zero client requests for a minute (untagged,
    interactive and batch alike), probes only; it stays last in every order, as the fallback."""
    policy, load = setup([A, B, C], probes=10.0)
    load.run(10, 20, [None, "interactive", "batch"])
    load.ttft["a"] = 5.0
    load.run(5, 20, [None, "interactive", "batch"])
    later = load.run(60, 20, [None, "interactive", "batch"])
    assert sum(1 for s in later if s.provider == "a") == 0
    exp = policy.explain([A, B, C])["a"]
    assert exp["promise"] == "probes-only"
    assert exp["effective_weight"] == 0.0
    assert "probes only" in exp["reason"]
    for cls in (None, "interactive", "batch"):
        assert policy.order([A, B, C], cls)[-1] == A  # a slow answer beats a refusal (paced-out healthy routes)
    # b and c share the alias by their own weights meanwhile: 30/10 → 75/25
    assert share(later, "b") == pytest.approx(0.75, abs=0.01)


def test_a_preferred_route_far_over_the_slo_yields_to_a_healthy_one() -> None:
    """Batch prefers b and c; both far over: batch goes to a (which meets its SLO), none to b or c."""
    policy, load = setup([A, B, C])
    load.ttft = {"a": 0.2, "b": 4.0, "c": 4.0}
    load.run(10, 20, ["batch", None])
    later = load.run(20, 20, ["batch", None])
    assert Counter(s.provider for s in later) == Counter({"a": 400})


def test_open_and_half_open_breakers_get_no_client_request() -> None:
    policy, load = setup([A, B], breakers=True)
    assert load.breakers is not None
    for _ in range(5):
        load.breakers.get("a").record(False, "http_5xx")
    sent = load.run(5.5, 20)
    assert all(s.provider == "b" for s in sent)
    assert load.breakers.get("a").state == "half_open"  # cool-down 5 s: its trials are the probes
    sent = load.run(3, 20)
    assert all(s.provider == "b" for s in sent)
    assert policy.explain([A, B])["a"]["evidence"] == "breaker half-open"


def test_recovery_is_learnt_from_probes_and_readmitted_with_a_slow_start() -> None:
    """After a 5× slowdown A gets no client traffic; it recovers at T: three probes (1 s apart while it is
    down-weighted) re-admit it, its share climbs gradually, and it is back to its configured share within
    30 s of T; no request is sent to it while it is still slow."""
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    policy, load = setup(routes, probes=10.0)
    load.run(10, 20)
    load.ttft["a"] = 5.0
    load.run(60, 20)
    assert policy.explain(routes)["a"]["promise"] == "probes-only"
    restore = load.clock.t
    load.ttft["a"] = 0.3
    after = load.run(40, 20)
    firsts = [s.t for s in after if s.provider == "a"]
    assert firsts
    assert 2.0 <= firsts[0] - restore <= 6.0  # three probes within the SLO, 1 s apart
    early = share(after, "a", restore + 5, restore + 10)
    assert 0.05 < early < 0.7  # slow start: part of its 80 %
    assert share(after, "a", restore + 25, restore + 40) == pytest.approx(0.8, abs=0.01)
    exp = policy.explain(routes)["a"]
    assert exp["promise"] == "configured-split"


def test_readmission_explains_the_slow_start() -> None:
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    policy, load = setup(routes, probes=10.0)
    load.ttft["a"] = 5.0
    load.run(20, 20)
    load.ttft["a"] = 0.3
    load.run(8, 20)
    exp = policy.explain(routes)["a"]
    assert exp["promise"] == "slow-start"
    assert exp["reason"].startswith("re-admitting: ")
    assert "of configured, slow start" in exp["reason"]


# -- promise 3: react at first-token speed ---------------------------------------------------------


def test_a_5x_slowdown_moves_90_percent_off_within_3_s_at_10_rps() -> None:
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    _, load = setup(routes, probes=10.0)
    load.ttft = {"a": 0.5, "b": 0.5}
    load.run(30, 10)
    fault = load.clock.t
    load.ttft["a"] = 2.5  # 5× its TTFT: 2.5× the 1 s SLO
    sent = load.run(30, 10)
    t = time_below(sent, "a", fault, 0.10)
    assert t is not None
    assert t <= 3.0, t


def test_an_outage_moves_off_within_1_s() -> None:
    """Refused connections from T on, while streams sent before T (TTFT 0.8 s) keep answering after it: the
    faults of the attempts sent after T count against everything sent since, so those late answers do not
    outvote them (nor reset a breaker's count of failures in a row in time)."""
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    _, load = setup(routes, breakers=True, probes=10.0)
    load.ttft = {"a": 0.8, "b": 0.8}
    load.run(30, 10)
    fault = load.clock.t
    load.down.add("a")
    sent = load.run(30, 10)
    t = time_below(sent, "a", fault, 0.10)
    assert t is not None
    assert t <= 0.6, t  # the target: 1 s


def test_waiting_attempts_count_once_past_the_slo() -> None:
    """Decided attempts in the window plus those waiting past the SLO; older decisions do not count."""
    slo = SLO(1.0, 3.0)
    # (sent at, latency, stream): five decided at 99.2, before the window; one met, one fault, one late answer
    decisions = [(99.0, 0.2, True)] * 5 + [(100.0, 0.3, True), (100.5, float("inf"), True), (96.6, 4.0, False)]
    waiting = [(98.0, True), (100.5, True), (97.5, False)]  # 3 s and 0.5 s for a first token; 3.5 s for an answer
    view = first_token_view(decisions, waiting, slo, 101.0, 1.5)
    assert (view.decided, view.missed, view.faults, view.waiting_late) == (5, 4, 1, 2)
    assert (view.sent_recent, view.faults_recent) == (2, 1)  # sent in the last 0.75 s: 100.5 twice (one failed)
    assert view.oldest_wait_s == pytest.approx(3.5)
    assert far_at_first_token(view, 3)
    assert not far_at_first_token(first_token_view(decisions, [], slo, 101.0, 1.5), 3)  # 2 of 3 missed


# -- promise 4: degrade evenly ---------------------------------------------------------------------


def test_when_every_route_is_over_its_slo_the_split_is_even_not_winner_takes_all() -> None:
    """A at 2.5×, B at 3× the SLO, configured 50/50: both keep traffic, the less-bad one a little more."""
    routes = [Route("m", "a", "ma", 50), Route("m", "b", "mb", 50)]
    policy, load = setup(routes)
    load.ttft = {"a": 2.5, "b": 3.0}
    load.run(20, 10)
    sent = load.run(30, 10)
    a = share(sent, "a")
    assert 0.45 < a < 0.75, a  # an exponent-4 split would give a 67 % more weight: (3 / 2.5) ** 4 ≈ 2.1
    exp = policy.explain(routes)
    assert {e["promise"] for e in exp.values()} == {"even-degradation"}
    assert exp["a"]["reason"].startswith("every route over its slo: ")


def test_even_split_weighs_relative_health_and_queue_depth() -> None:
    assert even_split([50, 50], [0.5, 0.25], [0, 0]) == pytest.approx([25.0, 12.5])
    # same health, b's queue is three times what its share says: it gets less
    w = even_split([50, 50], [0.5, 0.5], [2, 10])
    assert w[0] > 1.5 * w[1]
    assert even_split([80, 20], [0.0, 0.0], [0, 0]) == [80, 20]  # nothing known: the configuration
    assert even_split([80, 20], [1.0, 0.001], [0, 0], floor=0.05)[1] == pytest.approx(0.05 * sum([80, 0.02]), rel=0.01)


# -- promise 5: start from what the monitor knows --------------------------------------------------


def test_priors_from_the_store_keep_a_slow_provider_out_of_the_first_minute(tmp_path: Path) -> None:
    """The monitor saw a's TTFT P90 at 5 s (b's at 0.4 s): a gets no client request at start-up, only
    probes; b's prior meets the SLO. A prior of a provider within the SLO changes nothing."""
    now = 1_790_000_000.0
    samples = [Sample(now - 10 * i, "a", "ma", "short", 200, None, 5000.0, 6000.0, 8) for i in range(20)]
    samples += [Sample(now - 10 * i, "b", "mb", "short", 200, None, 400.0, 600.0, 8) for i in range(20)]
    path = tmp_path / "store.db"
    with closing(open_db(path)) as conn:
        insert_samples(conn, samples)
        priors = recent_priors(conn, 900.0, now)
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    policy, load = setup(routes)
    policy.seed_priors(priors)
    exp = policy.explain(routes)
    assert exp["a"]["source"] == "prior"
    assert exp["a"]["promise"] == "probes-only"
    assert "monitor's recent ttft p90 5.00s" in exp["a"]["evidence"]
    assert exp["b"]["promise"] == "configured-split"
    sent = load.run(30, 10)
    assert all(s.provider == "b" for s in sent)
    fresh, fresh_load = setup(routes)
    fresh.seed_priors({("a", "ma"): {"ttft_p90_ms": 400.0, "error_rate": 0.0, "n": 20}})
    assert share(fresh_load.run(20, 10), "a") == pytest.approx(0.8, abs=0.01)


# -- helpers of the promises ----------------------------------------------------------------------


def test_readmit_evidence_and_slow_start() -> None:
    slo = SLO(1.0, 3.0)
    ok3 = [(10.0, 0.3, True), (11.0, 0.4, True), (12.0, 0.2, True)]
    assert readmit_evidence(ok3, 9.0, slo, 3, 0)
    assert not readmit_evidence(ok3, 10.5, slo, 3, 0)  # only two since the demotion
    assert not readmit_evidence(ok3, 9.0, slo, 3, 1)  # an attempt still waits past the SLO
    assert not readmit_evidence([*ok3[:2], (12.0, 2.0, True)], 9.0, slo, 3, 0)
    assert slow_start(0.1, 1.0, 1.5, 15.0) == pytest.approx(0.2)
    assert slow_start(0.95, 1.0, 3.0, 15.0) == 1.0


def test_a_flapping_route_needs_more_evidence_each_time() -> None:
    """Slow 10 s, fast 10 s, over and over: each re-admission that ends in a demotion within a minute
    quadruples the probe evidence needed next time (3, 12 probes), so the slow spells cost fewer and fewer
    requests: after the second, the route waits out every 10 s healthy spell on probes."""
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    _, load = setup(routes, probes=10.0)
    load.run(10, 10)
    in_slow_spells = []
    for _ in range(4):
        load.ttft["a"] = 3.0
        slow = load.run(10, 10)
        in_slow_spells.append(sum(1 for s in slow if s.provider == "a"))
        load.ttft["a"] = 0.3
        load.run(10, 10)
    assert in_slow_spells[0] > 0  # the first spell: seen at first-token speed, a few requests
    assert in_slow_spells == sorted(in_slow_spells, reverse=True), in_slow_spells
    assert in_slow_spells[2:] == [0, 0], in_slow_spells  # 12 probes > a 10 s healthy spell: it stays out


def test_after_an_outage_the_breakers_probe_trials_readmit_and_the_share_is_back_within_30_s() -> None:
    """A 45 s outage (the breaker re-opens on failed probe trials, its cool-down capped at 10 s), then the
    restore: the successful trial probes that close the breaker are the re-admission evidence, and the slow
    start brings the primary back to its configured 80 % within 30 s; no request reaches it meanwhile
    while it is down."""
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    policy, load = setup(routes, breakers=True, probes=10.0)
    load.run(20, 10)
    load.down.add("a")
    during = load.run(45, 10)
    assert share(during, "a", load.clock.t - 44, load.clock.t) == 0.0
    restore = load.clock.t
    load.down.discard("a")
    after = load.run(40, 10)
    assert share(after, "a", restore + 25, restore + 40) == pytest.approx(0.8, abs=0.01)
    assert policy.explain(routes)["a"]["promise"] == "configured-split"


def test_rare_independent_spikes_do_not_cost_a_route_its_share() -> None:
    """3 % of a's requests wait 4.5 s (its P90 stays 0.5 s, within the 1 s SLO): several such requests are
    often waiting at once, which is not a stall; a keeps exactly its configured 80 %."""
    routes = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]
    policy, load = setup(routes, probes=10.0)
    load.ttft = {"a": [0.5] * 32 + [4.5], "b": 0.5}
    sent = load.run(60, 20)
    assert share(sent, "a") == pytest.approx(0.8, abs=0.005)
    assert policy.explain(routes)["a"]["promise"] == "configured-split"
