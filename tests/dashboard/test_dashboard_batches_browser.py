"""Cost per batch on the dashboard: ``/dashboard/api/batches`` and the Keys & spend page's Batches table, in real
headless Chromium against a gateway that ran two batches through the official ``openai`` SDK — one as a provider's
batch job (tier ``batch``), one on the batch lane (tier ``standard``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from openai import AsyncOpenAI

from _require import CHROMIUM, require_chromium
from conftest import GatewayHandle, SimFactory

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
ADMIN = "tg-admin-key-0123456789"
DASH = "tg-dashboard-key-0123456789"
KEY = "sk-team-a-0123456789"


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Every test here drives Debian's chromium (tests/_require.py: a skip, or a failure under CI=true)."""
    require_chromium()


def _lines(n: int) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat", "messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": 5},
            }
        ).encode()
        + b"\n"
        for i in range(n)
    )


async def _run_batch(client: AsyncOpenAI, n: int, window: str) -> tuple[str, float]:
    """A batch of ``n`` lines run to its end: its id and its cost (the Batch object's ``tailgate`` field)."""
    f = await client.files.create(file=("in.jsonl", _lines(n)), purpose="batch")
    batch = await client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window=window,  # type: ignore[arg-type]  # the SDK types 24h only
    )
    deadline = time.monotonic() + 12.0
    while (got := await client.batches.retrieve(batch.id)).status != "completed":
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.05)
    return batch.id, float((got.model_extra or {})["tailgate"]["cost"])


@pytest.mark.timeout(60)  # two batches, a browser start and a page load on a busy 2-core machine
async def test_the_dashboard_shows_each_batchs_cost_and_price_tiers(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], oai: Callable[..., AsyncOpenAI]
) -> None:
    """The API (with the dashboard key; 401 without) lists both batches, newest first, each with its status,
    counts, cost so far (the Batch object's) and its lines by lane and tier; the page shows them in its Batches
    table, text left and numbers right."""
    from playwright.async_api import async_playwright

    provider = await sim("instant", models=("m",), faults={"batch_turnaround_s": 0.1})
    gw = await gateway(
        {
            "admin_key": ADMIN,
            "dashboard_key": DASH,
            "keys": [{"id": "team-a", "key": KEY}],
            "providers": {
                "p": {
                    "base_url": provider.url,
                    "api_keys": ["sk-p-0123456789"],
                    "price": {"input": 2, "output": 8, "currency": "CNY", "batch": {"ratio": 0.5}},
                    "batch_api": True,
                }
            },
            "models": {"chat": {"routes": [{"provider": "p", "model": "m"}]}},
            "routing": {"probes": {"enabled": False}},
            "batch": {"poll_interval": 0.05, "provider_poll_interval": 0.05},
        }
    )
    client = oai(gw.url, key=KEY)
    job_id, job_cost = await _run_batch(client, 3, "24h")  # a provider job: price.batch
    lane_id, lane_cost = await _run_batch(client, 2, "1h")  # too little window for a job: the lane, live price
    assert job_cost > 0
    assert lane_cost > 0

    async with aiohttp.ClientSession() as session:
        async with session.get(gw.root_url + "/dashboard/api/batches") as r:
            assert r.status == 401
        async with session.get(
            gw.root_url + "/dashboard/api/batches", headers={"Authorization": f"Bearer {DASH}"}
        ) as r:
            assert r.status == 200
            data = await r.json()
    assert data["currency"] == "CNY"
    got = data["batches"]
    assert [b["id"] for b in got] == [lane_id, job_id]
    assert [(b["key_id"], b["status"], b["request_counts"]) for b in got] == [
        ("team-a", "completed", {"total": 2, "completed": 2, "failed": 0}),
        ("team-a", "completed", {"total": 3, "completed": 3, "failed": 0}),
    ]
    assert [b["cost"] for b in got] == pytest.approx([lane_cost, job_cost])
    assert [[(t["lane"], t["price_tier"], t["lines"]) for t in b["tiers"]] for b in got] == [
        [("batch-lane", "standard", 2)],
        [("provider-batch", "batch", 3)],
    ]
    assert [sum(t["cost"] for t in b["tiers"]) for b in got] == pytest.approx([lane_cost, job_cost])

    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            await page.goto(gw.root_url + "/dashboard/keys")
            await page.wait_for_selector("body[data-loaded]")
            assert await page.locator("#batches-error").is_visible()  # no key: the table says why it is empty
            await page.fill("#admin-key", DASH)
            await page.click("#admin-form button[type=submit]")
            await page.wait_for_selector("#batches tbody tr")
            head = [h.strip() for h in await page.locator("#batches thead th").all_text_contents()]
            assert head[:8] == [
                "batch",
                "key",
                "status",
                "done",
                "failed",
                "total",
                "cost so far (CNY)",
                "lanes and price tiers",
            ]
            row = page.locator("#batches tbody tr", has_text=job_id)
            cells = [c.strip() for c in await row.locator("td").all_text_contents()]
            assert cells[:6] == [job_id, "team-a", "completed", "3", "0", "3"]
            assert cells[6] == f"{job_cost:,.4f}"
            tier = await row.locator('span.tier[data-lane="provider-batch"]').text_content()
            assert tier == f"provider-batch · batch: 3 lines, {job_cost:,.4f}"
            lane_row = page.locator("#batches tbody tr", has_text=lane_id)
            assert await lane_row.locator('span.tier[data-lane="batch-lane"]').count() == 1
            align = await row.locator("td").evaluate_all("tds => tds.map(td => getComputedStyle(td).textAlign)")
            assert (align[0], align[2], align[7]) == ("left", "left", "left")
            assert align[3] == align[6] == "right"
        finally:
            await browser.close()
    assert problems == []
