"""The dashboard a minute into a demo, in real headless Chromium at 1280 and 1920 px: every chart drawn from
10 s buckets, no table cut off by the viewport (the Keys page included), and the key box and the empty states
saying the true reason. Screenshots go to the test's output dir (and ``artifacts/``)."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import fill_demo_store

from _require import CHROMIUM, require_chromium
from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.ledger.keys import create_key
from tailgate.ledger.store import open_store

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "tg-admin-key-0123456789"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
WIDTHS = (1280, 1920)

# Every table on the page: its right edge inside the viewport, or inside a scroll box that is itself inside
# the viewport, scrolls, and says so in a visible line under it (a scroll bar alone may be an overlay, or
# absent from a screenshot, and then reads as a column cut off).
CUT_TABLES = """() => Array.from(document.querySelectorAll('table'))
  .filter((t) => t.offsetParent !== null).flatMap((t) => {
  const vw = document.documentElement.clientWidth;
  const right = t.getBoundingClientRect().right;
  if (right <= vw + 0.5) return [];
  const box = t.closest('.scroll');
  if (box && box.getBoundingClientRect().right <= vw + 0.5 && getComputedStyle(box).overflowX === 'auto'
      && box.scrollWidth > box.clientWidth && box.nextElementSibling
      && box.nextElementSibling.classList.contains('scroll-hint') && !box.nextElementSibling.hidden) return [];
  return [`${t.id || t.className}: right edge ${Math.round(right)} > viewport ${vw}`];
})"""


async def cut_tables(page: Any) -> list[str]:
    """The tables cut off by the viewport, once the page's scroll hints have caught up (or after 5 s)."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        await page.wait_for_function(f"({CUT_TABLES})().length === 0", timeout=5_000)
    found: list[str] = await page.evaluate(CUT_TABLES)
    return found


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Every test here drives Debian's chromium (tests/_require.py: a skip, or a failure under CI=true)."""
    require_chromium()


@pytest.mark.timeout(90)  # a browser start and four page loads on a busy 2-core machine
async def test_first_minute_of_a_demo_draws_every_chart_and_cuts_no_column(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], tmp_path: Path
) -> None:
    """60 s of demo traffic and probes: the page opens on 15 min, every chart is drawn, no table passes the
    viewport at 1280 or 1920 px on either page, and before the key no "no samples" sits beside the key error."""
    from playwright.async_api import async_playwright

    a, b = await sim(), await sim()
    gw = await gateway(two_provider_config(a.url, b.url, admin_key=ADMIN))
    assert gw.gateway.ledger is not None
    await fill_demo_store(gw.gateway.ledger.path, time.time(), probes=True)
    with open_store(gw.gateway.ledger.path) as conn:  # a key with every budget: the Keys page's widest row
        create_key(
            conn,
            "team-search-and-recommendations",
            rpm=600,
            tokens_per_day=5_000_000,
            cost_per_day=50,
            cost_per_month=1000,
            metadata={"team": "search"},
        )
    await gw.gateway.key_directory.reload()

    problems: list[str] = []
    shots: list[Path] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=ARGS, ignore_default_args=["--hide-scrollbars"]
        )
        try:
            for width in WIDTHS:
                page = await browser.new_page(viewport={"width": width, "height": 1000})
                # Before the key is entered the API answers 401 on purpose; the browser logs each as an error.
                page.on(
                    "console",
                    lambda m: (
                        problems.append(f"console: {m.text}")
                        if m.type == "error" and "401 (Unauthorized)" not in m.text
                        else None
                    ),
                )
                page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
                await page.goto(gw.root_url + "/dashboard")
                await page.wait_for_selector("body[data-loaded]", timeout=15_000)
                # Keys exist, so the data needs a key: the box says so, and no section claims "no samples".
                assert await page.locator("#admin-key").get_attribute("placeholder") == (
                    "admin or dashboard key: shows the data"
                )
                assert await page.locator("#leaderboard-error").is_visible()
                for empty in ("leaderboard-empty", "compare-empty", "charts-empty", "heatmap-empty"):
                    assert await page.locator(f"#{empty}").is_hidden(), empty

                await page.fill("#admin-key", ADMIN)
                await page.click("#admin-form button[type=submit]")
                await page.wait_for_selector("#admin-status:has-text('controls unlocked')")
                await page.wait_for_selector('body[data-charts="15m"] #charts .chart-card')
                await page.wait_for_selector("#compare tbody tr")
                assert await page.locator("#window-switch button.on").text_content() == "15 min"
                assert await page.locator("#charts .chart-card").count() == 2
                charts = page.locator("#charts .chart")
                assert await charts.count() == 6
                assert await page.locator("#charts .chart .empty").count() == 0  # no "collecting data"
                assert await page.locator("#charts .chart canvas").count() == 6
                assert await cut_tables(page) == [], width
                shot = tmp_path / f"dashboard-first-minute-{width}.png"
                await page.screenshot(path=str(shot), full_page=True)
                shots.append(shot)

                await page.goto(gw.root_url + "/dashboard/keys")
                await page.fill("#admin-key", ADMIN)
                await page.click("#admin-form button[type=submit]")
                await page.wait_for_selector("#keys tbody tr:has-text('team-search-and-recommendations')")
                await page.wait_for_selector("#usage tfoot tr.total")
                assert await cut_tables(page) == [], width
                shot = tmp_path / f"dashboard-keys-{width}.png"
                await page.screenshot(path=str(shot), full_page=True)
                shots.append(shot)
                await page.close()
        finally:
            await browser.close()
    assert problems == []
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    for shot in shots:
        assert shot.stat().st_size > 20_000
        shutil.copyfile(shot, artifacts / shot.name)
