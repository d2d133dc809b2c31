"""One budget-invariant run (issue 37), shared by ``tests/gateway/test_gateway_budget_invariant.py`` (a short
version, in the suite) and ``benchmarks/budget_invariant.py`` (≥ 2,000 requests).

A gateway over simulated providers — one that answers whole, three that cut every stream after 2, 7 or 19
tokens — serves one key with a small daily token budget. A list of requests of random shape (``Shape``: chat or
``/v1/messages`` passthrough or translated; CJK, emoji, code or English prompts; ``n``; stream or not; cut by
the client after a random number of chunks, or by the provider) is sent at once. Then, per request id, the
ledger is held against the simulator's truth, and the key's spend against its budget (``check``). Requests go in
waves of concurrent ones, so the budget is spent to its end on the way.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp

from sim_truth import truth
from tailgate.gateway.request_path.estimate import prompt_bound
from tailgate.ledger import read_rows
from tailgate.ledger.usage import day_start
from tailgate.sim.faults import Faults
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider

KEY = "tg-budget-invariant-key-0123456789"
CUTS = (2, 7, 19)
"""The providers that cut every stream, after this many tokens."""
ENGINE: dict[str, Any] = {"pre_median_s": 0.0, "step_ms": 1.0, "jitter": 0.0, "default_output_tokens": 24}
SCRIPTS: dict[str, str] = {
    "english": "Please summarise the state of the queue and the latency of the gateway. ",
    "cjk": "请总结一下队列的状态以及网关在高负载下的延迟表现，尤其是尾部延迟。",
    "emoji": "🙂🚀👩‍💻🎉✅🔥 status? ",
    "code": 'def f(x: int) -> dict[str, list[int]]:\n    return {"a": [x, x + 1, 0x1F]}  # ok\n',
}
Api = Literal["chat", "pass", "trans"]
Cut = Literal["none", "client", "provider"]


@dataclass(frozen=True)
class Shape:
    """One request: where it goes, what it says, how it ends."""

    api: Api
    script: str
    repeat: int
    n: int
    stream: bool
    max_tokens: int
    cut: Cut
    cut_at: int
    """client: chunks read before closing; provider: which of ``CUTS`` serves it."""

    def alias(self) -> str:
        where = f"cut{CUTS[self.cut_at % len(CUTS)]}" if self.cut == "provider" else "whole"
        return f"{self.api}-{where}"

    def body(self) -> bytes:
        text = SCRIPTS[self.script] * self.repeat
        obj: dict[str, Any] = {
            "model": self.alias(),
            "messages": [{"role": "user", "content": text}],
            "max_tokens": self.max_tokens,
        }
        if self.stream:
            obj["stream"] = True
        if self.api == "chat" and self.n > 1:
            obj["n"] = self.n
        return json.dumps(obj, ensure_ascii=self.repeat % 2 == 0).encode()


@dataclass
class Sent:
    shape: Shape
    body: bytes
    status: int = 0
    tokens_seen: int = 0
    """Token-carrying events the client read (a client cut's lower bound)."""


@dataclass
class Verdict:
    """What one batch showed."""

    requests: int = 0
    admitted: int = 0
    spent: int = 0
    budget: int = 0
    overshoot: int = 0
    """Tokens spent past the budget (the promise: 0)."""
    mismatches: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _spec(cut: int | None) -> ProviderSpec:
    spec = ProviderSpec(name="budget", params=replace(preset("instant"), **ENGINE), preset="instant", port=0)
    return replace(spec, models=("up",), faults=Faults(disconnect_after_tokens=cut) if cut is not None else Faults())


def gateway_config(urls: dict[str, str], budget: int, state: dict[str, Any] | None) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    models: dict[str, Any] = {}
    for where, url in urls.items():
        root = url.removesuffix("/v1")
        providers[f"{where}-oa"] = {"base_url": url, "api_keys": [f"sk-{where}-oa-0123456789"]}
        providers[f"{where}-an"] = {"base_url": url, "anthropic_base_url": root, "api_keys": [f"sk-{where}-an-0123"]}
        for api, prov in (("chat", "oa"), ("trans", "oa"), ("pass", "an")):
            models[f"{api}-{where}"] = {"routes": [{"provider": f"{where}-{prov}", "model": "up"}]}
    config: dict[str, Any] = {
        "providers": providers,
        "models": models,
        "keys": [{"id": "tenant", "key": KEY, "budget": {"tokens_per_day": budget}}],
        "retry": {"max_attempts": 1},
    }
    if state is not None:
        config["state"] = state
    return config


@asynccontextmanager
async def fleet(budget: int, redis_url: str | None) -> AsyncIterator[tuple[Any, str, list[SimProvider], Path]]:
    """The simulators and a gateway (its ledger in a fresh directory) on ephemeral loopback ports."""
    from aiohttp import web

    from tailgate.config.loader import validate_data
    from tailgate.config.resolve import resolve_providers
    from tailgate.config.schema import GatewayConfig
    from tailgate.gateway.app import Gateway
    from tailgate.gateway.http.listener import runner_kwargs
    from tailgate.gateway.http.listener import site as limits_site

    sims = [SimProvider(_spec(cut)) for cut in (None, *CUTS)]
    for s in sims:
        await s.start()
    state = None
    if redis_url is not None:
        ns = f"bi{uuid.uuid4().hex[:10]}"
        state = {"backend": "redis", "url": redis_url, "namespace": ns, "timeout": 0.5, "sync_interval": 0.05}
    urls = {"whole": sims[0].url, **{f"cut{c}": s.url for c, s in zip(CUTS, sims[1:], strict=True)}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        data = {"ledger": {"enabled": True, "path": str(path)}, **gateway_config(urls, budget, state)}
        cfg = validate_data(data, GatewayConfig, "budget-run")
        gw = Gateway(cfg, resolve_providers(cfg))
        await gw.start()
        runner = web.AppRunner(gw.app(), handler_cancellation=True, access_log=None, **runner_kwargs(cfg.server))
        await runner.setup()
        site = limits_site(runner, "127.0.0.1", 0, cfg.server)
        await site.start()
        try:
            yield gw, f"http://127.0.0.1:{site.port}", sims, path
        finally:
            await runner.cleanup()
            await gw.close()
            for s in sims:
                await s.stop()


def _tokens_in(line: bytes) -> int:
    """1 when an SSE line carries an output token (an Anthropic delta of text/thinking/tool input, or a chat
    chunk with content), else 0."""
    if not line.startswith(b"data: {"):
        return 0
    try:
        obj = json.loads(line[6:])
    except ValueError:
        return 0
    if obj.get("type") == "content_block_delta":
        return int(obj.get("delta", {}).get("type") in ("text_delta", "thinking_delta", "input_json_delta"))
    choices = obj.get("choices") or []
    delta = choices[0].get("delta", {}) if choices else {}
    return int(bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")))


async def _send(session: aiohttp.ClientSession, base: str, sent: Sent, rid: str) -> None:
    shape = sent.shape
    path = "/v1/chat/completions" if shape.api == "chat" else "/v1/messages"
    headers = {"Content-Type": "application/json", "x-request-id": rid}
    if shape.api == "chat":
        headers["Authorization"] = f"Bearer {KEY}"
    else:
        headers |= {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    async with session.post(base + path, data=sent.body, headers=headers) as resp:
        sent.status = resp.status
        if not (shape.stream and shape.cut == "client" and resp.status == 200):
            await resp.read()
            return
        chunks = 0
        async for line in resp.content:
            sent.tokens_seen += _tokens_in(line)
            chunks += line.startswith(b"data:")
            if chunks >= shape.cut_at:
                break
        resp.close()  # the client leaves mid-stream


async def _truth(session: aiohttp.ClientSession, sims: list[SimProvider]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in sims:
        for rec in await truth(s.url, session=session):
            out[rec.get("client_request_id") or "-"].append(rec)
    return out


async def run_batch(shapes: list[Shape], budget: int, redis_url: str | None, wave: int = 8) -> Verdict:
    """Send ``shapes`` through a fresh gateway, ``wave`` at once, wave after wave (the budget runs out on the way);
    hold its ledger against the simulators' truth."""
    verdict = Verdict(requests=len(shapes), budget=budget)
    async with fleet(budget, redis_url) as (gw, base, sims, path):
        sent = {f"bi-{uuid.uuid4().hex[:12]}": Sent(s, s.body()) for s in shapes}
        async with aiohttp.ClientSession() as session:
            items = list(sent.items())
            for i in range(0, len(items), wave):  # concurrent within a wave; each wave finds the last one settled
                await asyncio.gather(*(_send(session, base, one, rid) for rid, one in items[i : i + wave]))
                await _settled(gw)
            served = {rid for rid, one in sent.items() if one.status == 200}
            for _ in range(300):  # a simulator records a stream its client left once it notices: poll
                truth = await _truth(session, sims)
                if served <= truth.keys():
                    break
                await asyncio.sleep(0.01)
            counter = await _counter(gw)
        await gw.books.drain()
        assert gw.ledger is not None
        await gw.ledger.flush()
        rows = {r.request_id: r for r in read_rows(path) if r.request_id in sent}
    check(verdict, sent, rows, truth)
    if counter != verdict.spent:
        verdict.mismatches.append(f"budget counter {counter} != ledger {verdict.spent}")
    return verdict


async def _settled(gw: Any) -> None:
    """Every request's handler ended and its settlement reached the state."""
    for _ in range(500):
        await gw.books.drain()
        if not gw.admission._pending:
            return
        await asyncio.sleep(0.01)


async def _counter(gw: Any) -> float:
    """The key's daily budget counter in the fleet state (allowances given back first with Redis)."""
    state = gw.admission._state()
    allow = gw.admission._held(state)
    if allow is not None:
        await allow.close()
    day = int(day_start(time.time()))
    return float(await state.usage(f"key:tenant:budget:tokens:daily:{day}", None))


def check(
    verdict: Verdict, sent: dict[str, Sent], rows: dict[str, Any], truth: dict[str, list[dict[str, Any]]]
) -> None:
    """Per request id: the ledger row against the simulator's truth (see the module docstring); the spend."""
    bad = verdict.mismatches
    for rid, one in sent.items():
        shape, row = one.shape, rows.get(rid)
        if row is None:
            bad.append(f"{rid}: no ledger row")
            continue
        verdict.outcomes[row.outcome] += 1
        recs = truth.get(rid, [])
        prompt, output = row.prompt_tokens or 0, row.output_tokens or 0
        verdict.spent += prompt + output
        if row.provider is None:  # refused before any attempt: nothing upstream, nothing charged
            if recs or prompt or output:
                bad.append(f"{rid}: refused ({row.outcome}) yet {len(recs)} upstream, {prompt}+{output} charged")
            continue
        verdict.admitted += 1
        if not recs and row.outcome == "client_closed" and not (prompt or output):
            continue  # the client left before the provider read the request: nothing asked, nothing charged
        if len(recs) != 1:
            bad.append(f"{rid}: {len(recs)} upstream records ({row.outcome} {row.status} {prompt}+{output} {shape})")
            continue
        t = recs[0]
        answers = shape.n if shape.api == "chat" else 1
        reserved = prompt_bound(one.body) + shape.max_tokens * answers
        if prompt + output > reserved:
            bad.append(f"{rid}: charged {prompt + output} > reserved {reserved:.0f}")
        if t["status"] == 499 or row.outcome == "client_closed":
            # The client left mid-stream: billed what the gateway relayed — at least what the client read; the
            # provider's own count when its usage came before the gateway noticed (the simulator finished: 200).
            if t["status"] == 200 and not row.tokens_estimated:
                good = output == t["output_tokens"] and prompt == t["prompt_tokens"]
            elif t["status"] == 200:
                good = one.tokens_seen <= output <= t["output_tokens"]
            else:
                good = one.tokens_seen <= output and row.tokens_estimated
            if not good:
                bad.append(
                    f"{rid}: client cut after {one.tokens_seen} tokens, billed {prompt}+{output}, truth "
                    f"{t['status']} {t.get('prompt_tokens')}+{t.get('output_tokens')} ({row.outcome}, {shape})"
                )
            if output and prompt <= 0:
                bad.append(f"{rid}: client cut after output, prompt {prompt}")
            continue
        if t["status"] != 200 and t.get("fault") != "disconnect":  # refused upstream (n > 1): charged nothing
            if prompt or output:
                bad.append(f"{rid}: upstream {t['status']} yet {prompt}+{output} charged")
            continue
        if row.outcome == "ok" or t.get("fault") == "disconnect":  # whole, or cut by the provider
            if output != t["output_tokens"]:
                bad.append(f"{rid}: output {output} != truth {t['output_tokens']} ({row.outcome}, {shape})")
            want_prompt = t["prompt_tokens"]
            if row.tokens_estimated and shape.api != "pass":  # the provider never said: the gateway's count
                want_prompt = round(prompt_bound(one.body))
            if prompt != want_prompt:
                bad.append(f"{rid}: prompt {prompt} != {want_prompt} ({row.outcome}, {shape})")
            if (row.outcome != "ok") != row.tokens_estimated:
                bad.append(f"{rid}: {row.outcome} with tokens_estimated={row.tokens_estimated}")
            continue
        bad.append(f"{rid}: unexplained ({row.outcome}, truth {t['status']} {t.get('fault')})")
    verdict.overshoot = max(0, verdict.spent - verdict.budget)
