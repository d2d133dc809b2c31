"""The dashboard's JSON API against a real SQLite store: every number equals one recomputed from the raw rows."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from dashboard_support import PAIRS, fill_demo_store, fill_store

from tailgate.dashboard import mount
from tailgate.ledger import leaderboard
from tailgate.ledger.leaderboard import nearest_rank
from tailgate.ledger.row import LedgerRow
from tailgate.ledger.samples import Sample, TrafficMinute, insert_samples
from tailgate.ledger.schema import open_db
from tailgate.stats import LatencyHistogram

NOW = 1_796_220_000.0 + 1234.5  # a fixed wall clock, not on a bucket boundary
Get = Callable[..., Awaitable[tuple[int, Any]]]


@pytest.fixture
async def dash(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Get]]]:
    """Factory: serve ``mount(app, db_path)`` on an ephemeral port with the clock pinned at NOW."""
    runners: list[web.AppRunner] = []
    session = aiohttp.ClientSession()

    async def start(db_path: Path, **kwargs: Any) -> Get:
        app = web.Application()
        mount(app, db_path, clock=lambda: NOW, **kwargs)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        async def get(path: str, method: str = "GET", **kw: Any) -> tuple[int, Any]:
            async with session.request(method, f"http://127.0.0.1:{port}{path}", **kw) as r:
                text = await r.text()
                try:
                    return r.status, json.loads(text)
                except ValueError:
                    return r.status, text

        return get

    yield start
    await session.close()
    for r in runners:
        await r.cleanup()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Sample], list[TrafficMinute]]:
    path = tmp_path_factory.mktemp("store") / "tailgate.db"
    samples, traffic = fill_store(path, NOW)
    return path, samples, traffic


def _probe_point(group: list[Sample]) -> dict[str, Any]:
    """The probe numbers recomputed from raw samples with the rules docs/dashboard.md states."""
    ok = [s for s in group if s.error_class is None]
    ttft = [s.ttft_ms for s in ok if s.ttft_ms is not None]
    e2e = [s.e2e_ms for s in ok if s.workload == "long" and s.e2e_ms is not None]
    rates = [s.tok_s for s in ok if s.workload == "long" and s.tok_s is not None]
    out: dict[str, Any] = {"count": len(group), "errors": len(group) - len(ok)}
    out["error_rate"] = round(out["errors"] / len(group), 4) if group else None
    for name, values in (("ttft", ttft), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = round(nearest_rank(values, q), 3) if values else None
    out["tok_s"] = round(sum(rates) / len(rates), 3) if rates else None
    return out


def _traffic_point(rows: list[TrafficMinute]) -> dict[str, Any]:
    requests, errors = sum(r.requests for r in rows), sum(r.errors for r in rows)
    out: dict[str, Any] = {
        "count": requests,
        "errors": errors,
        "error_rate": round(errors / requests, 4) if requests else None,
    }
    for name in ("ttft", "e2e"):
        h = LatencyHistogram()
        for r in rows:
            text = r.ttft_hist if name == "ttft" else r.e2e_hist
            if text:
                h.merge(LatencyHistogram.from_dict(json.loads(text)))
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = round(h.percentile(q), 3) if h.count else None
    n = sum(r.tok_s_n for r in rows)
    out["tok_s"] = round(sum(r.tok_s_sum for r in rows) / n, 3) if n else None
    return out


@pytest.mark.parametrize(("window", "width", "buckets"), [("1h", 60.0, 60), ("24h", 900.0, 96), ("7d", 3600.0, 168)])
async def test_series_buckets_equal_recomputed_numbers(
    dash: Callable[..., Awaitable[Get]],
    store: tuple[Path, list[Sample], list[TrafficMinute]],
    window: str,
    width: float,
    buckets: int,
) -> None:
    """Each bucket of /series holds exactly the probe and traffic numbers recomputed from the rows in it."""
    path, samples, traffic = store
    get = await dash(path)
    status, body = await get(f"/dashboard/api/series?provider=primary&model=up-primary&window={window}")
    assert status == 200
    assert body["bucket_s"] == width
    assert len(body["t"]) == buckets
    first = body["t"][0]
    assert first == math.floor(NOW / width) * width - (buckets - 1) * width
    assert body["t"][-1] <= NOW < body["t"][-1] + width
    checked_probe = checked_traffic = 0
    for i, t0 in enumerate(body["t"]):
        group = [s for s in samples if s.provider == "primary" and t0 <= s.ts < t0 + width]
        rows = [r for r in traffic if r.provider == "primary" and t0 <= r.minute < t0 + width]
        want_p, want_t = _probe_point(group), _traffic_point(rows)
        got_p = {k: v[i] for k, v in body["probe"].items()}
        got_t = {k: v[i] for k, v in body["traffic"].items()}
        assert got_p == want_p, (t0, got_p, want_p)
        assert got_t == want_t, (t0, got_t, want_t)
        checked_probe += bool(group)
        checked_traffic += bool(rows)
    assert checked_probe >= 2
    assert checked_traffic >= 2


def _request_point(rows: list[LedgerRow]) -> dict[str, Any]:
    """Traffic numbers recomputed from raw ledger rows: latencies from served requests, TTFT and tok/s from
    streamed ones (the traffic recorder's rules, docs/dashboard.md)."""
    ok = [r for r in rows if r.outcome == "ok"]
    streamed = [r for r in ok if r.stream]
    ttft = [r.ttft_ms for r in streamed if r.ttft_ms is not None]
    e2e = [r.e2e_ms for r in ok if r.e2e_ms is not None]
    rates = [
        (r.output_tokens - 1) * 1000.0 / (r.e2e_ms - r.ttft_ms)
        for r in streamed
        if r.output_tokens and r.output_tokens > 1 and r.e2e_ms is not None and r.ttft_ms is not None
    ]
    out: dict[str, Any] = {"count": len(rows), "errors": len(rows) - len(ok)}
    out["error_rate"] = round(out["errors"] / len(rows), 4) if rows else None
    for name, values in (("ttft", ttft), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = round(nearest_rank(values, q), 3) if values else None
    out["tok_s"] = round(sum(rates) / len(rates), 3) if rates else None
    return out


async def test_short_window_buckets_a_fresh_gateways_requests_every_10_s(
    dash: Callable[..., Awaitable[Get]], tmp_path: Path
) -> None:
    """A gateway one minute old (no traffic minute written yet): 15m has 90 buckets of 10 s, each holding the
    numbers recomputed from the ledger rows in it; catalog and compare find the pairs from those rows too."""
    path = tmp_path / "demo.db"
    rows = await fill_demo_store(path, NOW)
    get = await dash(path)
    status, body = await get("/dashboard/api/series?provider=secondary&model=up-secondary&window=15m")
    assert status == 200
    assert (body["bucket_s"], len(body["t"])) == (10.0, 90)
    assert body["t"][-1] <= NOW < body["t"][-1] + 10.0
    drawn = 0
    for i, t0 in enumerate(body["t"]):
        group = [r for r in rows if r.provider == "secondary" and t0 <= r.ts < t0 + 10.0]
        got = {k: v[i] for k, v in body["traffic"].items()}
        assert got == _request_point(group), (t0, got)
        drawn += got["tok_s"] is not None
    assert drawn >= 6  # a line from the first minute, not one point
    status, cat = await get("/dashboard/api/catalog?window=15m")
    want = {p: sum(r.provider == p for r in rows) for p, _ in PAIRS}
    assert {p["provider"]: p["requests"] for p in cat["pairs"]} == want
    status, cmp = await get("/dashboard/api/compare?window=15m")
    got_rows = {r["provider"]: r["traffic"] for r in cmp["rows"]}
    assert got_rows["primary"] == _request_point([r for r in rows if r.provider == "primary"])


async def test_heatmap_cells_equal_recomputed_p90(
    dash: Callable[..., Awaitable[Get]], store: tuple[Path, list[Sample], list[TrafficMinute]]
) -> None:
    """Hour-of-day P90 E2E per provider (in the browser's time zone) matches the raw rows; the 11:00 peak shows."""
    path, samples, traffic = store
    get = await dash(path)
    tz = 480  # UTC+8
    status, body = await get(f"/dashboard/api/heatmap?window=7d&tz={tz}")
    assert status == 200
    assert body["providers"] == ["primary", "secondary"]
    assert body["hours"] == list(range(24))
    for provider, _ in PAIRS:
        for hour in range(24):
            mine = [
                s
                for s in samples
                if s.provider == provider
                and NOW - 7 * 86400 <= s.ts <= NOW
                and int(((s.ts + tz * 60) % 86400) // 3600) == hour
                and s.error_class is None
                and s.workload == "long"
            ]
            e2e = [s.e2e_ms for s in mine if s.e2e_ms is not None]
            assert body["probe_n"][provider][hour] == len(e2e)
            assert body["probe"][provider][hour] == round(nearest_rank(e2e, 90), 3)
        rows = [r for r in traffic if r.provider == provider]
        for hour in range(24):
            in_hour = [r for r in rows if int(((r.minute + tz * 60) % 86400) // 3600) == hour]
            assert body["traffic"][provider][hour] == _traffic_point(in_hour)["e2e_p90"]
    # the synthetic peak is at 11:00 UTC = 19:00 at UTC+8
    row = body["probe"]["primary"]
    assert max(range(24), key=lambda h: row[h]) == 19


async def test_compare_and_catalog_equal_recomputed(
    dash: Callable[..., Awaitable[Get]], store: tuple[Path, list[Sample], list[TrafficMinute]]
) -> None:
    """Probe vs traffic over a window, and the pair catalog, match the raw rows."""
    path, samples, traffic = store
    get = await dash(path)
    status, body = await get("/dashboard/api/compare?window=24h")
    assert status == 200
    assert [(r["provider"], r["model"]) for r in body["rows"]] == list(PAIRS)
    for row in body["rows"]:
        group = [s for s in samples if s.provider == row["provider"] and NOW - 86400 <= s.ts <= NOW]
        minutes = [r for r in traffic if r.provider == row["provider"]]
        assert row["probe"] == _probe_point(group)
        assert row["traffic"] == _traffic_point(minutes)
    status, cat = await get("/dashboard/api/catalog?window=7d")
    assert status == 200
    for entry in cat["pairs"]:
        assert entry["samples"] == sum(
            1 for s in samples if s.provider == entry["provider"] and s.ts >= NOW - 7 * 86400
        )
        assert entry["requests"] == sum(r.requests for r in traffic if r.provider == entry["provider"])


async def test_leaderboard_is_the_ledgers_leaderboard(
    dash: Callable[..., Awaitable[Get]], store: tuple[Path, list[Sample], list[TrafficMinute]]
) -> None:
    """/leaderboard returns leaderboard.compute() rows as JSON, with window, model filter and sort applied."""
    path, _, _ = store
    get = await dash(path)
    status, body = await get("/dashboard/api/leaderboard?window=7d&sort=tok_s")
    assert status == 200
    with contextlib.closing(open_db(path)) as conn:
        want = [r.to_dict() for r in leaderboard.compute(conn, window_s=7 * 86400.0, now=NOW, sort="tok_s")]
        one = [r.to_dict() for r in leaderboard.compute(conn, window_s=3600.0, now=NOW, model="up-secondary")]
    assert body["rows"] == json.loads(json.dumps(want))
    assert [r["provider"] for r in body["rows"]] == ["primary", "secondary"]  # faster first by tok/s
    status, body = await get("/dashboard/api/leaderboard?window=1h&model=up-secondary")
    assert status == 200
    assert body["rows"] == json.loads(json.dumps(one))
    assert [r["model"] for r in body["rows"]] == ["up-secondary"]


async def test_empty_or_missing_store_reads_as_empty(dash: Callable[..., Awaitable[Get]], tmp_path: Path) -> None:
    """No file: every view is empty (no error) and no file is created; a version-1 store is empty too."""
    missing = tmp_path / "nothing" / "tailgate.db"
    get = await dash(missing)
    for path in ("leaderboard", "compare", "catalog", "heatmap"):
        status, body = await get(f"/dashboard/api/{path}")
        assert status == 200, body
    status, body = await get("/dashboard/api/series?provider=primary")
    assert status == 200
    assert set(body["probe"]["count"]) == {0}
    assert set(body["probe"]["ttft_p90"]) == {None}
    assert not missing.exists()
    status, body = await get("/dashboard/api/leaderboard")
    assert body["rows"] == []


async def test_page_assets_and_modes(dash: Callable[..., Awaitable[Get]], tmp_path: Path) -> None:
    """The page and the vendored uPlot are served; without a gateway /live is 404 and controls are absent."""
    get = await dash(tmp_path / "t.db")
    status, html = await get("/dashboard")
    assert status == 200
    assert "dashboard/static/vendor/uplot/uPlot.iife.min.js" in html
    assert await get("/dashboard/") == (200, html)  # redirected
    assert "http://" not in html.replace('href="http', "")  # nothing from a CDN
    for asset in (
        "vendor/uplot/uPlot.iife.min.js",
        "vendor/uplot/uPlot.min.css",
        "vendor/uplot/LICENSE",
        "dashboard.js",
    ):
        status, text = await get(f"/dashboard/static/{asset}")
        assert status == 200, asset
        assert len(text) > 500
    status, meta = await get("/dashboard/api/meta")
    assert meta == {
        "mode": "monitor",
        "live": False,
        "controls": False,
        "auth_required": False,
        "windows": ["15m", "1h", "24h", "7d"],
        "now": NOW,
    }
    status, body = await get("/dashboard/api/live")
    assert status == 404
    assert body["error"]["type"] == "invalid_request_error"
    status, body = await get("/dashboard/api/providers/primary/drain", method="POST")
    assert status == 404


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("series?window=1h", "provider"),
        ("series?provider=a&window=2h", "window"),
        ("series?provider=a&workload=huge", "workload"),
        ("leaderboard?window=soon", "window"),
        ("leaderboard?sort=vibes", "sort"),
        ("heatmap?tz=abc", "tz"),
        ("heatmap?tz=2000", "tz"),
        ("compare?now=yesterday", "now"),
        ("compare?now=nan", "now"),
    ],
)
async def test_bad_parameters_are_400_naming_the_parameter(
    dash: Callable[..., Awaitable[Get]], tmp_path: Path, query: str, param: str
) -> None:
    """A bad query parameter is an OpenAI-shaped 400 whose ``param`` names it."""
    get = await dash(tmp_path / "t.db")
    status, body = await get(f"/dashboard/api/{query}")
    assert status == 400
    assert body["error"]["param"] == param


async def test_heavy_views_are_cached_briefly_unless_now_is_pinned(
    dash: Callable[..., Awaitable[Get]], tmp_path: Path
) -> None:
    """An identical request within the cache time gets the same answer; a pinned ``now`` always reads the store."""
    path = tmp_path / "t.db"
    open_db(path).close()  # a migrated, empty store
    get = await dash(path)
    assert (await get("/dashboard/api/catalog?window=7d"))[1]["pairs"] == []
    with contextlib.closing(open_db(path)) as conn:
        insert_samples(conn, [Sample(NOW - 10, "primary", "up-primary", "short", 200, None, 100.0, 200.0, 12)])
    assert (await get("/dashboard/api/catalog?window=7d"))[1]["pairs"] == []
    _, fresh = await get(f"/dashboard/api/catalog?window=7d&now={NOW}")
    assert fresh["pairs"] == [{"provider": "primary", "model": "up-primary", "samples": 1, "requests": 0}]


def test_public_names() -> None:
    """The package exports exactly these names; a change here is a change of its public face."""
    import tailgate.dashboard

    assert tailgate.dashboard.__all__ == ["Controls", "LiveCallback", "live_view", "mount"]
