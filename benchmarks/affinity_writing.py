"""Writing sessions over an 80/20 split with prompt caches (issue 28's Must show), on the simulator:

- ``one``: one provider alone (the cache's best case on this traffic);
- ``split``: 80/20, conversation affinity off (the per-request split: the next turn lands elsewhere 32 %);
- ``affinity``: 80/20, affinity on (the default);
- ``outage``: ``affinity`` with the primary down (connections reset) for the middle third of the run.

Each arm: fresh simulators (``provider-a`` shape, DeepSeek-like 64-token prefix cache) and a fresh in-process
gateway; ``--conversations`` writing conversations of ``--turns`` turns each, the document (~3,000 tokens) and
the whole history resent every turn, the client sending no affinity key, streamed through the openai SDK. Per arm:
cache-hit rate (cached ÷ prompt tokens from usage), P90 TTFT of turns ≥ 2, input cost per 1k requests at
DeepSeek's published prices (2 / 0.2 per 1M tokens, cache miss / hit), the served split of conversations
(their first turn), failed requests, route moves and cold turns after the first.

    .venv/bin/python benchmarks/affinity_writing.py [--conversations 200] [--turns 6] [--time-scale 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.process.replicas import LocalFleet
from tailgate.sim.faults import Faults
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider

PRICE = {"input": 2.0, "output": 3.0, "cached_input": 0.2}
WORDS = [
    "harbour",
    "dawn",
    "gulls",
    "nets",
    "tide",
    "lantern",
    "rope",
    "salt",
    "keel",
    "chapel",
    "bell",
    "fog",
    "pier",
    "widow",
    "letter",
    "storm",
    "mast",
    "cargo",
    "ledger",
    "clerk",
    "inn",
    "stairs",
    "candle",
    "map",
    "compass",
    "shoal",
    "reef",
    "beacon",
    "fisherman",
    "daughter",
    "promise",
    "winter",
]


@dataclass
class Turn:
    conv: int
    turn: int
    provider: str
    ttft_s: float
    prompt: int
    cached: int
    ok: bool


@dataclass
class Arm:
    name: str
    turns: list[Turn] = field(default_factory=list)
    failed: int = 0
    seconds: float = 0.0


def _document(i: int, tokens: int) -> str:
    rng = random.Random(i)
    return f"Document {i}.\n" + " ".join(rng.choice(WORDS) for _ in range(tokens))  # ~1 simulator token per word


def _config(urls: dict[str, str], arm: str, epsilon: float = 0.1) -> dict[str, Any]:
    names = ["primary"] if arm == "one" else ["primary", "secondary"]
    weights = {"primary": 80, "secondary": 20}
    return {
        "providers": {
            n: {"base_url": urls[n], "api_keys": [f"sk-{n}-0000000001", f"sk-{n}-0000000002"], "price": PRICE}
            for n in names
        },
        "models": {"writer": {"routes": [{"provider": n, "model": "m", "weight": weights[n]} for n in names]}},
        "routing": {
            "slo": {"ttft_p90": "5s", "e2e_p90": "10s"},
            "probes": {"interval": "1s"},
            "affinity": {"enabled": arm != "split", "epsilon": epsilon},
        },
        "ledger": {"enabled": False},
    }


async def _conversation(client: Any, i: int, turns: int, doc_tokens: int, arm: Arm) -> None:
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "You are a writing assistant. Keep the author's voice."},
        {"role": "user", "content": _document(i, doc_tokens) + "\n\nTighten the first paragraph."},
    ]
    for t in range(turns):
        t0 = time.perf_counter()
        first: float | None = None
        provider, prompt, cached, ok = "", 0, 0, True
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model="writer",
                messages=messages,
                max_tokens=16,
                stream=True,
                stream_options={"include_usage": True},
            )
            provider = raw.headers.get("x-tailgate-provider", "")
            async for chunk in raw.parse():
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter()
                if chunk.usage is not None:
                    prompt = chunk.usage.prompt_tokens
                    details = chunk.usage.prompt_tokens_details
                    cached = (details.cached_tokens or 0) if details is not None else 0
        except Exception:
            ok = False
            arm.failed += 1
        arm.turns.append(Turn(i, t, provider, (first or time.perf_counter()) - t0, prompt, cached, ok))
        revision = " ".join(random.Random(i * 100 + t).choice(WORDS) for _ in range(120))
        messages += [
            {"role": "assistant", "content": f"Revised paragraph {t + 1}: {revision}"},
            {"role": "user", "content": f"Good. Now paragraph {t + 2}: keep the imagery, cut ten percent."},
        ]


async def run_arm(name: str, args: argparse.Namespace) -> Arm:
    params = preset("provider-a")
    sims = {
        n: SimProvider(
            ProviderSpec(name=n, params=params, preset="provider-a", models=("m",), time_scale=args.time_scale, seed=k)
        )
        for k, n in enumerate(("primary", "secondary"))
    }
    for s in sims.values():
        await s.start()
    data = _config({n: s.url for n, s in sims.items()}, name, args.epsilon)
    cfg = validate_data(data, GatewayConfig, f"affinity_writing:{name}")
    fleet = LocalFleet(cfg, resolve_providers(cfg, "bench"), replicas=1, ledger_path=None)
    await fleet.start()
    arm = Arm(name)
    client = AsyncOpenAI(base_url=fleet.url, api_key="sk-client", max_retries=0, timeout=120)
    gate = asyncio.Semaphore(args.concurrency)
    started = 0
    third, two_thirds = asyncio.Event(), asyncio.Event()

    async def one(i: int) -> None:
        nonlocal started
        async with gate:
            started += 1
            if started >= args.conversations // 3:
                third.set()
            if started >= 2 * args.conversations // 3:
                two_thirds.set()
            await _conversation(client, i, args.turns, args.doc_tokens, arm)

    async def outage() -> None:  # the primary is down while the middle third of the conversations start
        await third.wait()
        sims["primary"].set_faults(Faults(outage=True, outage_mode="reset"))
        await two_thirds.wait()
        sims["primary"].clear_faults()

    t0 = time.perf_counter()
    try:
        side = asyncio.create_task(outage()) if name == "outage" else None
        await asyncio.gather(*(one(i) for i in range(args.conversations)))
        if side is not None:
            await side
    finally:
        arm.seconds = time.perf_counter() - t0
        await client.close()
        await fleet.close()
        for s in sims.values():
            await s.stop()
    return arm


def _moves(ts: list[Turn]) -> int:
    return sum(1 for a, b in itertools.pairwise(ts) if a.provider != b.provider)


def summary(arm: Arm) -> dict[str, Any]:
    ok = [t for t in arm.turns if t.ok]
    prompt = sum(t.prompt for t in ok)
    cached = sum(t.cached for t in ok)
    later = sorted(t.ttft_s for t in ok if t.turn >= 1)
    p90 = later[int(0.9 * (len(later) - 1))] if later else float("nan")
    cost = sum(((t.prompt - t.cached) * PRICE["input"] + t.cached * PRICE["cached_input"]) / 1e6 for t in ok)
    convs: dict[int, list[Turn]] = {}
    for t in sorted(arm.turns, key=lambda t: (t.conv, t.turn)):
        convs.setdefault(t.conv, []).append(t)
    firsts = [ts[0].provider for ts in convs.values() if ts]
    moves = sum(_moves(ts) for ts in convs.values())
    cold_later = sum(1 for ts in convs.values() for t in ts[1:] if t.ok and t.cached == 0)
    worst = max(
        (sum(1 for t in ts[1:] if t.cached == 0) - _moves(ts) for ts in convs.values()),
        default=0,
    )
    return {
        "requests": len(arm.turns),
        "failed": arm.failed,
        "hit_rate": cached / prompt if prompt else float("nan"),
        "ttft_p90_later_ms": p90 * 1000,
        "ttft_p50_later_ms": statistics.median(later) * 1000 if later else float("nan"),
        "input_cost_per_1k": cost / len(ok) * 1000 if ok else float("nan"),
        "primary_share_conversations": firsts.count("primary") / len(firsts) if firsts else float("nan"),
        "moves": moves,
        "cold_later_turns": cold_later,
        "max_extra_cold_per_conv": worst,
        "seconds": arm.seconds,
    }


async def amain(args: argparse.Namespace) -> int:
    results = {}
    for name in args.arms.split(","):
        arm = await run_arm(name, args)
        results[name] = summary(arm)
        s = results[name]
        print(
            f"{name:>9}: {s['requests']} requests, {s['failed']} failed, hit rate {s['hit_rate']:.3f}, "
            f"P90 TTFT turns>=2 {s['ttft_p90_later_ms']:.1f} ms (P50 {s['ttft_p50_later_ms']:.1f}), "
            f"input {s['input_cost_per_1k']:.4f} CNY/1k req, conversations on primary "
            f"{s['primary_share_conversations']:.3f}, moves {s['moves']}, cold later turns {s['cold_later_turns']}, "
            f"max cold turns beyond moves in one conversation {s['max_extra_cold_per_conv']}, {s['seconds']:.1f} s",
            flush=True,
        )
    if "one" in results and "affinity" in results:
        one, aff = results["one"], results["affinity"]
        print(f"affinity hit rate / one provider's: {aff['hit_rate'] / one['hit_rate']:.3f} (target >= 0.95)")
        ratio = aff["input_cost_per_1k"] / one["input_cost_per_1k"]
        print(f"affinity input cost / one provider's: {ratio:.3f} (target <= 1.05)")
        if "split" in results:
            split = results["split"]
            print(f"per-request split hit rate / one provider's: {split['hit_rate'] / one['hit_rate']:.3f}")
            print(
                f"P90 TTFT turns>=2: affinity {aff['ttft_p90_later_ms']:.1f} ms vs split "
                f"{split['ttft_p90_later_ms']:.1f} ms (time scale {args.time_scale}: x{1 / args.time_scale:g} for "
                "preset time)"
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--doc-tokens", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--epsilon", type=float, default=0.1, help="routing.affinity.epsilon")
    ap.add_argument("--arms", default="split,affinity,one,outage")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    return asyncio.run(amain(args))


if __name__ == "__main__":
    raise SystemExit(main())
