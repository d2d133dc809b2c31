"""Synthetic store contents for the dashboard tests: a week of probes and two hours of gateway traffic."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

from tailgate.ledger.samples import Sample, TrafficMinute, insert_samples, insert_traffic
from tailgate.ledger.schema import open_db
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
