"""Synthetic store contents for the dashboard tests: a week of probes and two hours of gateway traffic."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

from tailgate.gateway.metrics.traffic_minutes import TrafficAggregator
from tailgate.ledger.row import LedgerRow
from tailgate.ledger.samples import Sample, TrafficMinute, insert_samples, insert_traffic
from tailgate.ledger.schema import open_db
from tailgate.ledger.sqlite import SQLiteLedger
from tailgate.stats import LatencyHistogram

PAIRS = (("primary", "up-primary"), ("secondary", "up-secondary"))
PROBE_EVERY_S = 1200.0
TRAFFIC_MINUTES = 120


def make_samples(now: float, rng: random.Random) -> list[Sample]:
    """Every 20 min for 7 days, per pair: a short, a long and an accuracy probe; ~5% failures; an 11:00 peak."""
    out: list[Sample] = []
    t = now - 7 * 86400.0 + 1.0
    while t <= now:
        hour = int((t % 86400.0) // 3600)
        peak = 2.5 if hour == 11 else 1.0
        for i, (provider, model) in enumerate(PAIRS):
            slow = 1.0 + 0.6 * i
            for workload in ("short", "long", "accuracy"):
                ts = t + rng.uniform(0, 30)
                if ts > now:
                    continue
                if rng.random() < 0.05:
                    out.append(Sample(ts, provider, model, workload, 503, "http_5xx"))
                    continue
                ttft = rng.lognormvariate(0, 0.4) * 300 * slow * peak
                tokens = 200 if workload == "long" else 12
                e2e = ttft + tokens * rng.uniform(15, 25) * slow * peak
                rate = (tokens - 1) / ((e2e - ttft) / 1000)
                right = (rng.random() < 0.9) if workload == "accuracy" else None
                out.append(Sample(ts, provider, model, workload, 200, None, ttft, e2e, tokens, rate, right))
        t += PROBE_EVERY_S
    return out


def _hist_json(values: list[float]) -> str | None:
    if not values:
        return None
    h = LatencyHistogram()
    h.record_many(values)
    return json.dumps(h.to_dict())


def make_traffic(now: float, rng: random.Random) -> list[TrafficMinute]:
    """The last two hours, per pair and minute: one row, and a second (another worker) every third minute."""
    out: list[TrafficMinute] = []
    first = (now // 60.0) * 60.0 - (TRAFFIC_MINUTES - 1) * 60.0
    for m in range(TRAFFIC_MINUTES):
        minute = first + m * 60.0
        for i, (provider, model) in enumerate(PAIRS):
            for _ in range(2 if m % 3 == 0 else 1):
                n = rng.randint(5, 30)
                errors = rng.randint(0, 2)
                ttft = [rng.lognormvariate(0, 0.3) * 250 * (1 + i) for _ in range(n - errors)]
                e2e = [x + rng.uniform(1000, 3000) * (1 + i) for x in ttft]
                rates = [rng.uniform(40, 60) / (1 + i) for _ in ttft]
                out.append(
                    TrafficMinute(
                        minute,
                        provider,
                        model,
                        n,
                        errors,
                        150 * n,
                        sum(rates),
                        len(rates),
                        _hist_json(ttft),
                        _hist_json(e2e),
                    )
                )
    return out


def fill_store(path: Path, now: float, seed: int = 7) -> tuple[list[Sample], list[TrafficMinute]]:
    """Write a week of probes and two hours of traffic ending at ``now`` into the store at ``path``."""
    rng = random.Random(seed)
    samples, traffic = make_samples(now, rng), make_traffic(now, rng)
    with contextlib.closing(open_db(path)) as conn:
        insert_samples(conn, samples)
        insert_traffic(conn, traffic)
    return samples, traffic


def make_demo_requests(now: float, rng: random.Random, seconds: float = 60.0) -> list[LedgerRow]:
    """A demo's first ``seconds`` of gateway traffic ending at ``now``: ~4 requests a second, 80 / 20 between the
    pairs, streamed and not, ~3 % errors — the rows the gateway's ledger writes, one per request."""
    rows: list[LedgerRow] = []
    t = now - seconds
    i = 0
    while t < now:
        provider, model = PAIRS[0] if rng.random() < 0.8 else PAIRS[1]
        slow = 1.0 if provider == PAIRS[0][0] else 1.6
        stream = rng.random() < 0.7
        failed = rng.random() < 0.03
        tokens = rng.randint(40, 200)
        ttft = rng.lognormvariate(0, 0.3) * 200 * slow
        e2e = ttft + tokens * rng.uniform(18, 22) * slow
        rows.append(
            LedgerRow(
                ts=t,
                request_id=f"req-{i}",
                key_id=None,
                alias="deepseek-v3.2",
                provider=provider,
                upstream_model=model,
                endpoint="/v1/chat/completions",
                stream=stream,
                traffic_class="interactive",
                status=503 if failed else 200,
                outcome="http_5xx" if failed else "ok",
                attempts=1,
                prompt_tokens=30,
                output_tokens=None if failed else tokens,
                tokens_estimated=False,
                ttft_ms=None if failed else (ttft if stream else e2e),
                e2e_ms=None if failed else e2e,
                overhead_ms=0.4,
                cost=None,
            )
        )
        t += rng.expovariate(4.0)
        i += 1
    return rows


def make_demo_samples(now: float, rng: random.Random, seconds: float = 60.0) -> list[Sample]:
    """The monitor's probes over a demo's first ``seconds``: a short and a long probe per pair every 5 s."""
    out: list[Sample] = []
    t = now - seconds
    while t < now:
        for i, (provider, model) in enumerate(PAIRS):
            for workload, tokens in (("short", 12), ("long", 200)):
                ttft = rng.lognormvariate(0, 0.3) * 200 * (1 + 0.6 * i)
                e2e = ttft + tokens * rng.uniform(18, 22) * (1 + 0.6 * i)
                rate = (tokens - 1) / ((e2e - ttft) / 1000)
                out.append(Sample(t + rng.uniform(0, 4), provider, model, workload, 200, None, ttft, e2e, tokens, rate))
        t += 5.0
    return [s for s in out if s.ts < now]


async def fill_demo_store(
    path: Path, now: float, seed: int = 11, *, probes: bool = False, minutes: bool = True
) -> list[LedgerRow]:
    """Write a demo's first minute of traffic ending at ``now`` with the gateway's own writers: the ledger's
    ``requests`` rows and (``minutes``) the traffic aggregator's ``traffic_minutes``, each request counted at its
    own time; with ``probes``, the monitor's samples of that minute too."""
    rng = random.Random(seed)
    rows = make_demo_requests(now, rng)
    async with SQLiteLedger(path) as ledger:
        for row in rows:
            ledger.record(row)
    if minutes:
        at = [now]
        traffic = TrafficAggregator(path, clock=lambda: at[0])
        await traffic.start()
        for row in rows:
            at[0] = row.ts
            traffic.observe(
                row.provider,
                row.upstream_model,
                row.outcome,
                row.output_tokens,
                row.ttft_ms,
                row.e2e_ms,
                stream=row.stream,
            )
        at[0] = now
        await traffic.close()
    if probes:
        with contextlib.closing(open_db(path)) as conn:
            insert_samples(conn, make_demo_samples(now, rng))
    return rows
