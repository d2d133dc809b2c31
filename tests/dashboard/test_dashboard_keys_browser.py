"""The Keys & spend page in real headless Chromium against a gateway with keys: without a key it says a key is
needed, a wrong key is named wrong, the read-only dashboard key (entered on the page, kept for the tab's session)
shows every key's spend and budgets and the usage report with refusals apart from errors, currency and totals."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from _require import CHROMIUM, require_chromium
from conftest import GatewayHandle, SimFactory
from tailgate.ledger.keys import create_key
from tailgate.ledger.store import open_store

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
ADMIN = "tg-admin-key-0123456789"
DASH = "tg-dashboard-key-0123456789"


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Every test here drives Debian's chromium (tests/_require.py: a skip, or a failure under CI=true)."""
    require_chromium()


@pytest.mark.timeout(60)  # a browser start and a few page loads on a busy 2-core machine
async def test_keys_page_with_the_dashboard_key(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """No key: the page says one is needed; a wrong key: says so; the dashboard key: keys with budgets used/left,
    spend with errors, refusals, totals and the currency, text left and numbers right; a reload keeps the key."""
    from playwright.async_api import async_playwright

    provider = await sim("instant", models=("m",))
    gw = await gateway(
        {
            "admin_key": ADMIN,
            "dashboard_key": DASH,
            "keys": [{"id": "platform", "key": "sk-platform-0123456789"}],
            "providers": {"p": {"base_url": provider.url, "price": {"input": 2, "output": 8, "currency": "CNY"}}},
            "models": {"chat": {"routes": [{"provider": "p", "model": "m"}]}},
            "routing": {"probes": {"enabled": False}},
        }
    )
    assert gw.gateway.ledger is not None
    with open_store(gw.gateway.ledger.path) as conn:
        _, secret = create_key(
            conn, "team-a", rpm=2, tokens_per_day=100_000, cost_per_month=5, metadata={"team": "search"}
        )
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        statuses = []
        for _ in range(3):  # two served, the third refused by the rpm
            payload = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
            async with session.post(
                gw.url + "/chat/completions", json=payload, headers={"Authorization": f"Bearer {secret}"}
            ) as r:
                statuses.append(r.status)
        assert statuses == [200, 200, 429]
    await gw.gateway.ledger.flush()

    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on(
                "request",
                lambda r: None if r.url.startswith(gw.root_url + "/") else problems.append(f"off-site: {r.url}"),
            )
            await page.goto(gw.root_url + "/dashboard/keys")
            await page.wait_for_selector("body[data-loaded]")
            keys_error = page.locator("#keys-error")
            assert await keys_error.is_visible()
            assert "enter the admin key or the read-only dashboard key" in (await keys_error.text_content() or "")
            assert await page.locator("#usage-error").is_visible()  # the spend table says why it is empty

            await page.fill("#admin-key", "tg-wrong-key-0123456789")
            await page.click("#admin-form button[type=submit]")
            await page.wait_for_selector("#admin-status:has-text('wrong key')")
            assert await keys_error.is_visible()

            await page.fill("#admin-key", DASH)
            await page.click("#admin-form button[type=submit]")
            await page.wait_for_selector("#admin-status:has-text('read-only dashboard key accepted')")
            await page.wait_for_selector("#keys tbody tr")
            await page.wait_for_selector("#usage tfoot tr.total")
            assert not await keys_error.is_visible()
            assert await page.locator("#create-form").is_hidden()  # read-only: no create, no revoke
            assert await page.locator("#keys button").count() == 0

            row = page.locator("#keys tbody tr", has_text="team-a")
            cells = [c.strip() for c in await row.locator("td").all_text_contents()]
            assert cells[:3] == ["team-a", "active", "all"]
            assert (cells[4], cells[5]) == ("3", "1")  # requests today, refused today
            tokens_today = int(cells[6].replace(",", ""))
            assert tokens_today > 0
            day = row.locator('span.budget[data-budget="tokens_per_day"]')
            assert await day.text_content() == (
                f"tokens/day: {tokens_today:,} used of 100,000, {100_000 - tokens_today:,} left"
            )
            month = await row.locator('span.budget[data-budget="cost_per_month"]').text_content() or ""
            assert month.startswith("cost/month: ")
            assert month.endswith(" left CNY")
            assert "cost today (CNY)" in (await page.locator("#keys thead").text_content() or "")
            assert "costs in CNY" in (await page.locator("#currency-note").text_content() or "")

            head = [h.strip() for h in await page.locator("#usage thead th").all_text_contents()]
            assert head == ["key", "requests", "errors", "refused", "input tokens", "output tokens", "cost (CNY)"]
            team = [
                c.strip()
                for c in await page.locator("#usage tbody tr", has_text="team-a").locator("td").all_text_contents()
            ]
            assert team[1:4] == ["3", "0", "1"]  # refusals apart from errors
            total = [c.strip() for c in await page.locator("#usage tfoot td").all_text_contents()]
            assert total[:4] == ["total", "3", "0", "1"]

            align = await row.locator("td").evaluate_all("tds => tds.map(td => getComputedStyle(td).textAlign)")
            assert (align[0], align[1], align[9]) == ("left", "left", "left")  # id, state, budgets: text
            assert align[4] == align[6] == "right"  # numbers

            # The key is kept for the tab's session: a reload reads again without asking.
            await page.reload()
            await page.wait_for_selector("#admin-status:has-text('read-only dashboard key accepted')")
            await page.wait_for_selector("#keys tbody tr")
            assert await page.evaluate("sessionStorage.getItem('tailgate.dashboard.key')") == DASH
            await page.click("#forget-key")
            await page.wait_for_selector("#keys-error:not([hidden])")
            assert await page.evaluate("sessionStorage.getItem('tailgate.dashboard.key')") is None

            # The admin key: the same tables, plus create (the new key and its models shown once) and revoke.
            await page.fill("#admin-key", ADMIN)
            await page.click("#admin-form button[type=submit]")
            await page.wait_for_selector("#admin-status:has-text('admin key: create and revoke unlocked')")
            await page.wait_for_selector("#create-form:not([hidden])")
            await page.wait_for_selector("#keys tbody tr button")
            await page.fill("#new-id", "team-b")
            await page.fill("#new-models", "chat")
            await page.click("#create-form button[type=submit]")
            await page.wait_for_selector("#new-secret:has-text('models: chat')")
            assert (await page.locator("#new-secret").text_content() or "").startswith("key (shown once): sk-")
            await page.wait_for_selector("#keys tbody tr:has-text('team-b')")
        finally:
            await browser.close()
    assert problems == []
