"""An ended request's bookkeeping runs a moment later (``bookkeeping.Books``), and nothing that reads it or
stops the gateway can miss it."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.gateway.request_path import bookkeeping
from tailgate.ledger import read_rows
from tailgate.ledger.keys import create_key
from tailgate.ledger.store import open_store

ONE_TOKEN = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


class _Ended:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.ticket = None  # no key limits: nothing to settle
        self.rpm_taken = None  # no rpm taken: nothing to give back


async def test_a_batch_is_booked_once_after_the_delay_and_one_failure_spares_the_others(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    booked: list[tuple[str, float]] = []

    def record(gw: object, ctx: Any, now: float) -> None:
        if ctx.request_id == "bad":
            raise RuntimeError("a bug in the books")
        booked.append((ctx.request_id, now))

    monkeypatch.setattr(bookkeeping, "record", record)
    books = bookkeeping.Books(SimpleNamespace(quality=None))  # type: ignore[arg-type]  # no quality to flush
    for i, rid in enumerate(("r1", "bad", "r2")):
        books.add(_Ended(rid), float(i))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert booked == []
    assert len(books) == 3
    with caplog.at_level(logging.ERROR, logger="tailgate.gateway"):
        await asyncio.sleep(bookkeeping.BOOK_DELAY_S + 0.05)
    assert booked == [("r1", 0.0), ("r2", 2.0)]  # each with its own end time
    assert len(books) == 0
    assert "bookkeeping of request bad failed" in caplog.text
    books.add(_Ended("r3"), 3.0)  # type: ignore[arg-type]
    books.flush()  # at once, and the timer it had set is gone
    assert booked[-1] == ("r3", 3.0)
    await asyncio.sleep(bookkeeping.BOOK_DELAY_S + 0.05)
    assert len(booked) == 3


async def test_metrics_admin_and_stop_see_every_answered_request(
    monkeypatch: pytest.MonkeyPatch, sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """With the delay far longer than the test, only ``books_first`` and the stop can book the requests."""
    monkeypatch.setattr(bookkeeping, "BOOK_DELAY_S", 3600.0)
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway(two_provider_config(a.url, b.url, admin_key="admin-secret-0123456789"))
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(f"{gw.url}/chat/completions", json=ONE_TOKEN) as r:
                assert r.status == 200
        assert len(gw.gateway.books) == 3
        async with session.get(f"http://127.0.0.1:{gw.port}/metrics") as r:
            text = await r.text()
        served = re.findall(r'^tailgate_requests_total\{[^}]*outcome="ok"[^}]*\} (\S+)', text, re.M)
        assert sum(float(v) for v in served) == 3.0
        assert len(gw.gateway.books) == 0
        async with session.post(f"{gw.url}/chat/completions", json=ONE_TOKEN) as r:
            assert r.status == 200
        headers = {"Authorization": "Bearer admin-secret-0123456789"}
        async with session.get(f"http://127.0.0.1:{gw.port}/admin/providers", headers=headers) as r:
            assert r.status == 200
        assert len(gw.gateway.books) == 0  # any of the gateway's own endpoints books first
        async with session.post(f"{gw.url}/chat/completions", json=ONE_TOKEN) as r:
            assert r.status == 200
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    await gw.stop()  # the fifth request is still pending here: the stop books it before the ledger closes
    rows = read_rows(path)
    assert len(rows) == 5
    assert {row.outcome for row in rows} == {"ok"}


async def test_the_connection_serves_its_next_request_while_the_answered_one_finishes(
    monkeypatch: pytest.MonkeyPatch, sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """One keep-alive connection, a key with ``max_concurrency: 1``, answers and streams back to back. Each
    answered request is still waiting to finish (the delay is far longer than the test) when the next one on
    the same connection is served, and the key's one slot was free for it; nothing is lost when they finish."""
    monkeypatch.setattr(bookkeeping, "BOOK_DELAY_S", 3600.0)
    provider = await sim("instant", models=("up-primary",))
    config = {
        "admin_key": "admin-secret-0123456789",
        "providers": {"p": {"base_url": provider.url, "api_keys": ["sk-up-0123456789"]}},
        "models": {"deepseek-v3.2": {"routes": [{"provider": "p", "model": "up-primary"}]}},
    }
    gw = await gateway(config)
    assert gw.gateway.ledger is not None
    with open_store(gw.gateway.ledger.path) as conn:
        _, secret = create_key(conn, "one-at-a-time", max_concurrency=1)
    await gw.gateway.key_directory.reload()
    auth = {"Authorization": f"Bearer {secret}"}
    connector = aiohttp.TCPConnector(limit=1)  # one connection, kept alive
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(6):
            body = {**ONE_TOKEN, "stream": i % 2 == 1}
            async with session.post(f"{gw.url}/chat/completions", json=body, headers=auth) as r:
                assert r.status == 200, await r.text()
                await r.read()
        assert gw.gateway.books.finishing == 6  # every one answered, none finished yet
        async with session.get(f"http://127.0.0.1:{gw.port}/metrics") as r:
            text = await r.text()
    served = re.findall(r'^tailgate_requests_total\{[^}]*outcome="ok"[^}]*\} (\S+)', text, re.M)
    assert sum(float(v) for v in served) == 6.0  # /metrics let them finish first
    assert len(gw.gateway.books) == 0
    await gw.gateway.ledger.flush()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.key_id, r.outcome, r.stream) for r in rows] == [("one-at-a-time", "ok", i % 2 == 1) for i in range(6)]
