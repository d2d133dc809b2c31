"""A key's ``tpm`` and daily token budget on ``/v1/messages``, in both upstream modes — *passthrough* to the
simulator's own ``/v1/messages`` and *translation* to its chat API — held to docs/keys.md: a request is admitted
iff what the key used (settled to what the provider reported) plus this request's reservation (the prompt's
bound, ``request_path.estimate.prompt_bound``, + ``max_tokens``) fits the limit; the 429 speaks Anthropic and names
the limit; nothing refused goes upstream; and the prompt and output tokens each ledger row records — what the
counters are settled to — are the simulator's truth for that request (matched by ``x-request-id``), never an
estimate."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory
from sim_truth import truth_by_id
from tailgate.gateway.request_path.estimate import prompt_bound
from tailgate.ledger import LedgerRow, read_rows
from tailgate.ledger.usage import day_start, next_day
from tailgate.sim.provider import SimProvider

GwFactory = Callable[..., Awaitable[GatewayHandle]]
FAST = {"pre_median_s": 0.0, "step_ms": 0.2, "jitter": 0.0, "default_output_tokens": 12}
MODES = ("passthrough", "translation")
KEY = "tg-limited-client-key-0123456789"
TPM = 1000
BUDGET = 600


def _root(url: str) -> str:
    return url.removesuffix("/v1")


async def _start(sim: SimFactory, gateway: GwFactory, mode: str, **limits: Any) -> tuple[SimProvider, GatewayHandle]:
    """One alias ``claude`` on one simulator, spoken to in ``mode``; one YAML key ``k`` with ``limits``."""
    p = await sim("instant", models=("up",), engine=FAST)
    provider: dict[str, Any] = {"base_url": p.url, "api_keys": ["sk-up-0123456789"]}
    if mode == "passthrough":
        provider["anthropic_base_url"] = _root(p.url)
    gw = await gateway(
        {
            "providers": {"p": provider},
            "models": {"claude": {"routes": [{"provider": "p", "model": "up"}]}},
            "routing": {"probes": {"enabled": False}},
            "keys": [{"id": "k", "key": KEY, **limits}],
        }
    )
    return p, gw


def _body(max_tokens: int, stream: bool = False) -> bytes:
    obj: dict[str, Any] = {"model": "claude", "max_tokens": max_tokens, "stream": stream}
    obj["messages"] = [{"role": "user", "content": "hello there"}]
    return json.dumps(obj, separators=(",", ":")).encode()


def _reservation(max_tokens: int, stream: bool = False) -> float:
    """What admission reserves for ``_body(max_tokens)`` (docs/keys.md): the prompt's bound + max_tokens."""
    return prompt_bound(_body(max_tokens, stream)) + max_tokens


def _largest_fitting(room: float) -> int:
    """The largest max_tokens whose reservation fits ``room`` (the body's length grows with its digits)."""
    m = math.floor(room - prompt_bound(_body(1)))
    while _reservation(m) > room:
        m -= 1
    assert _reservation(m + 1) > room
    return m


async def _post(
    session: aiohttp.ClientSession, gw: GatewayHandle, max_tokens: int, rid: str, stream: bool = False
) -> tuple[int, Any, Any]:
    """(status, headers, body) of one /v1/messages request of the key: the JSON, or for a 200 stream the
    ``usage`` its events told the client (``message_start``'s, updated by ``message_delta``'s)."""
    headers = {"x-api-key": KEY, "content-type": "application/json", "x-request-id": rid}
    async with session.post(f"{gw.root_url}/v1/messages", data=_body(max_tokens, stream), headers=headers) as r:
        if not (stream and r.status == 200):
            return r.status, r.headers, await r.json()
        usage: dict[str, Any] = {}
        for line in (await r.text()).splitlines():
            if line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                part = event["message"]["usage"] if event["type"] == "message_start" else event.get("usage")
                usage.update({k: v for k, v in (part or {}).items() if v is not None})
        return r.status, r.headers, {"usage": usage}


async def _used(gw: GatewayHandle, counter: str, window_s: float | None) -> float:
    """The key's counter once every answered request is settled."""
    await gw.gateway.books.drain()
    return float(await gw.gateway.state.usage(counter, window_s))


def _check_rows_against_truth(
    rows: list[LedgerRow], served: dict[str, dict[str, Any]], answers: dict[str, Any]
) -> None:
    """Each admitted row holds the simulator's prompt and output tokens (and what the client was told); each
    refused row went nowhere and holds none."""
    for row in rows:
        assert (row.api, row.endpoint, row.key_id) == ("anthropic", "messages", "k")
        if row.outcome != "ok":
            assert row.request_id not in served
            assert (row.provider, row.prompt_tokens, row.output_tokens) == (None, None, None), row
            continue
        t = served[row.request_id]
        assert (row.prompt_tokens, row.output_tokens) == (t["prompt_tokens"], t["output_tokens"]), row
        assert t["prompt_tokens"] > 0
        assert row.tokens_estimated is False
        usage = answers[row.request_id]["usage"]
        told = usage["input_tokens"] + (usage.get("cache_read_input_tokens") or 0)
        assert (told, usage["output_tokens"]) == (t["prompt_tokens"], t["output_tokens"])


@pytest.mark.parametrize("mode", MODES)
async def test_tpm_on_messages_admits_exactly_what_fits_the_settled_minute(
    sim: SimFactory, gateway: GwFactory, mode: str
) -> None:
    """Under tpm 1000: after one request settles to its truth tokens, a request reserving one token more than
    the room left is refused (429 rate_limit_error, Retry-After, never sent upstream), the largest that fits is
    served, and the minute's counter equals the two served requests' truth tokens."""
    p, gw = await _start(sim, gateway, mode, tpm=TPM)
    counter = "key:k:tpm"
    answers: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        status, _, answers["t1"] = await _post(session, gw, 200, "t1")
        assert status == 200, answers["t1"]
        (first,) = (await truth_by_id(p.url)).values()
        used = await _used(gw, counter, 60.0)
        assert used == first["prompt_tokens"] + first["output_tokens"]  # settled to the truth, not the reservation
        fit = _largest_fitting(TPM - used)

        status, headers, refusal = await _post(session, gw, fit + 1, "t2")
        assert status == 429, refusal
        assert refusal["type"] == "error"
        assert refusal["error"]["type"] == "rate_limit_error"
        assert refusal["error"]["message"].startswith(
            f"Token rate limit of this key reached: this request reserves {_reservation(fit + 1):.0f} tokens "
            f"(prompt + max_tokens), more than the {TPM - used:.0f} of its {TPM} per minute free now. Retry after "
        ), refusal
        assert 1 <= int(headers["Retry-After"]) <= 60
        assert await _used(gw, counter, 60.0) == used  # the refusal kept nothing

        status, _, answers["t3"] = await _post(session, gw, fit, "t3")
        assert status == 200, answers["t3"]
        served = await truth_by_id(p.url)
        assert sorted(served) == ["t1", "t3"]  # the refused request never went upstream
        assert served["t3"]["api"] == ("anthropic" if mode == "passthrough" else "openai")
        want = sum(t["prompt_tokens"] + t["output_tokens"] for t in served.values())
        assert await _used(gw, counter, 60.0) == want
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.request_id, r.status, r.outcome) for r in rows] == [
        ("t1", 200, "ok"),
        ("t2", 429, "tpm_limited"),
        ("t3", 200, "ok"),
    ]
    _check_rows_against_truth(rows, served, answers)


@pytest.mark.parametrize("mode", MODES)
async def test_a_daily_token_budget_on_messages_admits_until_spent(
    sim: SimFactory, gateway: GwFactory, mode: str
) -> None:
    """Under a daily budget of 600 tokens, streamed and whole requests in turn: each is admitted iff the day's
    settled spend plus its reservation fits; the first refusal (429 billing_error naming the daily budget,
    Retry-After = until the UTC day ends) comes with the spend between 600 − one reservation and 600, a retry
    reads the same refusal, and the spend is the served requests' truth tokens."""
    p, gw = await _start(sim, gateway, mode, budget={"tokens_per_day": BUDGET})
    max_tokens = 100
    counter = f"key:k:budget:tokens:daily:{int(day_start(time.time()))}"
    answers: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(100):
            spent = await _used(gw, counter, None)
            rid, stream = f"b{i}", i % 2 == 1  # streamed and whole answers alike
            reserve = _reservation(max_tokens, stream)
            status, headers, answers[rid] = await _post(session, gw, max_tokens, rid, stream)
            if spent + reserve <= BUDGET:
                assert status == 200, (spent, answers[rid])
                continue
            assert status == 429, (spent, answers[rid])
            break
        else:
            pytest.fail("the budget never ended admission")
        refusal = answers.pop(rid)
        assert BUDGET - reserve < spent <= BUDGET  # docs/keys.md: ends between X − one reservation and X
        assert refusal["error"]["type"] == "billing_error"  # docs/gateway.md: a spent budget, status 429 kept
        # What is true: this request's reservation does not fit in what is left of the day's budget.
        assert refusal["error"]["message"].startswith(
            f"The daily budget of this key cannot cover this request: it reserves {reserve:.0f} tokens "
            f"(prompt + max_tokens), and {BUDGET - spent:.0f} of {BUDGET} tokens are left. It resets at 00:00 UTC, in "
        ), (spent, refusal)
        assert 1 <= int(headers["Retry-After"]) <= math.ceil(next_day(time.time()) - time.time()) + 1
        status, _, again = await _post(session, gw, max_tokens, "retry")
        assert status == 429
        assert again["error"]["type"] == "billing_error"
        assert again["error"]["message"].startswith("The daily budget of this key "), again
        assert "It resets at 00:00 UTC, in " in again["error"]["message"]
        served = await truth_by_id(p.url)
        assert sorted(served) == sorted(answers)  # the refusals never went upstream
        assert spent == sum(t["prompt_tokens"] + t["output_tokens"] for t in served.values())
        assert await _used(gw, counter, None) == spent  # the refusals kept nothing
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [r.outcome for r in rows] == ["ok"] * len(served) + ["budget_exceeded"] * 2
    _check_rows_against_truth(rows, served, answers)
