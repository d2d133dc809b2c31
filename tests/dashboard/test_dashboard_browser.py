"""The dashboard in real headless Chromium against a running gateway with data: it draws, and the drill works."""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from dashboard_support import PAIRS, fill_store

from _require import CHROMIUM, require_chromium
from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.ledger.quality import QualityCount, add_counts
from tailgate.ledger.schema import open_db

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "tg-admin-key-0123456789"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Every test here drives Debian's chromium (tests/_require.py: a skip, or a failure under CI=true)."""
    require_chromium()


async def test_dashboard_renders_in_headless_chromium(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], tmp_path: Path
) -> None:
    """Leaderboard rows, drawn uPlot charts, heatmap cells, live state, a working drain; no console errors."""
    from playwright.async_api import async_playwright

    a, b = await sim(), await sim()
    gw = await gateway(two_provider_config(a.url, b.url, admin_key=ADMIN, routing={"policy": "adaptive"}))
    assert gw.gateway.ledger is not None
    fill_store(gw.gateway.ledger.path, time.time())
    with contextlib.closing(open_db(gw.gateway.ledger.path)) as conn:  # answer-quality counts of the last hour
        (p1, m1), (p2, m2) = PAIRS[:2]
        add_counts(
            conn,
            time.time(),
            [QualityCount(p1, m1, "tool_args_invalid_json", 400, 40), QualityCount(p2, m2, "empty_answer", 120, 0)],
        )
    async with aiohttp.ClientSession() as s:
        for _ in range(8):
            payload = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(gw.url + "/chat/completions", json=payload) as r:
                assert r.status == 200

    shot = tmp_path / "dashboard.png"
    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on(
                "request",
                lambda r: None if r.url.startswith(gw.root_url + "/") else problems.append(f"off-site: {r.url}"),
            )
            await page.goto(gw.root_url + "/dashboard")
            await page.wait_for_selector("body[data-loaded]", timeout=15_000)

            assert await page.locator("#mode").text_content() == "gateway"
            assert await page.locator("#leaderboard tbody tr").count() == 2
            cells = await page.locator("#leaderboard tbody tr").first.locator("td").all_text_contents()
            # the accuracy with its 95 % Wilson interval and task count, as the CLI shows it
            assert any(re.fullmatch(r"\d+% \[\d+–\d+\] n=\d+", c) for c in cells), cells
            # the worst answer-quality signal with its 95 % Wilson interval, as the CLI's `quality` column shows it
            every = await page.locator("#leaderboard tbody td").all_text_contents()
            assert "tool JSON 10.0% [7.4–13.3] n=400" in every, every
            # the 120 stored, plus what the gateway judged of the live requests above if its board reached the
            # store first (answer quality counts every chat answer: docs/quality.md)
            assert any((m := re.fullmatch(r"ok n=(\d+)", c)) and 120 <= int(m[1]) <= 128 for c in every), every
            assert await page.locator("#compare tbody tr").count() == 2
            assert await page.locator("#heatmap td.cell").count() >= 24
            assert await page.locator("#live tbody tr").count() == 2
            # each provider's prompt-cache hit rate over the window (issue 28): "instant" reports 0 cached of the
            # short prompts, so 0.0 %, with the counts in the cell's title
            assert "cache hit" in (await page.locator("#live thead").text_content() or "")
            hit = page.locator('#live tr[data-provider="primary"] td').nth(10)
            assert await hit.text_content() == "0.0%"
            title = await hit.get_attribute("title") or ""
            assert "prompt tokens cached" in title
            assert "up-primary: 0 of " in title  # and per route (provider x upstream model)

            canvases = page.locator("#charts .uplot canvas")
            assert await canvases.count() == 6  # 2 providers x (latency, tok/s, errors)
            for i in range(await canvases.count()):
                box = await canvases.nth(i).bounding_box()
                assert box is not None
                assert box["width"] > 200
                assert box["height"] > 100

            # Sorting by a header click reorders the table.
            header = page.locator('#leaderboard th[data-key="provider"]')
            await header.click()
            first = await page.locator("#leaderboard tbody tr td").first.text_content()
            await header.click()
            assert await page.locator("#leaderboard tbody tr td").first.text_content() != first

            # Read-only until the admin key is entered; then drain works from the page.
            drain = page.locator('#live tr[data-provider="primary"] button[data-action="drain"]')
            assert await drain.is_disabled()
            # No gateway keys: the data is open, and the key box says the admin key is for the controls only.
            assert await page.locator("#admin-key").get_attribute("placeholder") == "admin key: enables drain / enable"
            await page.fill("#admin-key", ADMIN)
            await page.click("#admin-form button[type=submit]")
            await page.wait_for_selector("#admin-status:has-text('controls unlocked')")
            await page.locator('#live tr[data-provider="primary"] button[data-action="drain"]').click()
            await page.wait_for_selector('#live tr[data-provider="primary"] td.state-drained', timeout=5_000)
            assert gw.gateway.providers["primary"].drained
            weight = page.locator('#live tr[data-provider="secondary"] td').nth(2)
            assert await weight.text_content() == "deepseek-v3.2: 20 (100%)"  # the drained primary counts 0
            why = page.locator('#live tr[data-provider="secondary"] td').nth(3)  # the router's promise in force
            assert (await why.text_content() or "").startswith("deepseek-v3.2: within slo: configured 20%")

            # The 7-day switch redraws the charts.
            await page.click('#window-switch button[data-window="7d"]')
            await page.wait_for_selector('body[data-charts="7d"]')
            assert await page.locator("#charts .uplot canvas").count() == 6
            await page.wait_for_selector("#compare tbody tr")
            await page.screenshot(path=str(shot), full_page=True)
        finally:
            await browser.close()
    assert problems == []
    assert shot.stat().st_size > 20_000
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shutil.copyfile(shot, artifacts / "dashboard.png")


async def test_empty_store_in_monitor_mode_shows_empty_states(tmp_path: Path) -> None:
    """Monitor-only mode over a store with no samples: "no probe samples or traffic" everywhere, no live panel,
    no errors."""
    from aiohttp import web
    from playwright.async_api import async_playwright

    from tailgate.dashboard import mount

    app = web.Application()
    mount(app, tmp_path / "empty.db")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    root = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    problems: list[str] = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 800})
                page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
                page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
                await page.goto(root + "/dashboard")
                await page.wait_for_selector("body[data-loaded]", timeout=15_000)
                assert await page.locator("#mode").text_content() == "monitor only"
                assert await page.locator("#live-section").is_hidden()
                assert await page.locator("#admin-form").is_hidden()
                for empty in ("#leaderboard-empty", "#compare-empty", "#charts-empty", "#heatmap-empty"):
                    assert await page.locator(empty).is_visible(), empty
                    assert "no probe samples or traffic in" in (await page.locator(empty).text_content() or "")
                assert await page.locator("canvas").count() == 0
            finally:
                await browser.close()
    finally:
        await runner.cleanup()
    assert problems == []
