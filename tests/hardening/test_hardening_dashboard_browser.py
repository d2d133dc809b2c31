"""The locked dashboard in real headless Chromium: no data without a key; the read-only key shows it all
but cannot drain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from _require import CHROMIUM, require_chromium
from conftest import GatewayHandle, SimFactory, two_provider_config

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
DASH, ADMIN = "tg-dashboard-key-0123456789", "tg-admin-key-0123456789"


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Every test here drives Debian's chromium (tests/_require.py: a skip, or a failure under CI=true)."""
    require_chromium()


@pytest.mark.timeout(60)
async def test_dashboard_asks_for_a_key_and_the_read_only_key_opens_it(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """With gateway keys: the page loads, shows no live rows and asks for a key; the dashboard key fills
    the live table, and the drain buttons stay disabled."""
    from playwright.async_api import async_playwright

    a, b = await sim(), await sim()
    config = two_provider_config(
        a.url, b.url, keys=[{"id": "app", "key": "tg-client"}], admin_key=ADMIN, dashboard_key=DASH
    )
    gw = await gateway(config)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            pageerrors: list[str] = []
            page.on("pageerror", lambda e: pageerrors.append(str(e)))
            await page.goto(gw.root_url + "/dashboard")
            await page.wait_for_selector("#admin-status:has-text('dashboard key')", timeout=15_000)
            assert await page.locator("#live tbody tr").count() == 0
            await page.fill("#admin-key", DASH)
            await page.click("#admin-form button[type=submit]")
            await page.wait_for_selector("#admin-status:has-text('read-only key accepted')", timeout=10_000)
            await page.wait_for_function("document.querySelectorAll('#live tbody tr').length == 2")
            drain = page.locator('#live tr[data-provider="primary"] button[data-action="drain"]')
            assert await drain.is_disabled()
            assert pageerrors == []
        finally:
            await browser.close()
