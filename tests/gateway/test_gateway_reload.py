"""Config reload: SIGHUP and POST /admin/reload re-read the YAML; a bad file is rejected whole; /admin/config
shows the version (a hash of the file) so a fleet's replicas can be compared."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from conftest import SimFactory
from serve_process import ServeProcess
from tailgate.config.resolve import load_resolved
from tailgate.gateway.admin.reload import config_version
from tailgate.gateway.app import Gateway

ADMIN = {"Authorization": "Bearer admin-key-0123456789"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _write(path: Path, primary: str, secondary: str, **extra: Any) -> bytes:
    data: dict[str, Any] = {
        "admin_key": "admin-key-0123456789",
        "providers": {"a": {"base_url": primary}, "b": {"base_url": secondary}},
        "models": {"m": {"routes": [{"provider": "a", "model": "up", "weight": 1}]}},
        "routing": {"probes": {"enabled": False}},
        "ledger": {"enabled": False},
        **extra,
    }
    text = yaml.safe_dump(data).encode()
    path.write_bytes(text)
    return text


async def _start(path: Path) -> tuple[Gateway, aiohttp.web.AppRunner, str]:
    from aiohttp import web

    config, providers = load_resolved(path)
    gw = Gateway(config, providers, config_path=path)
    await gw.start()
    runner = web.AppRunner(gw.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return gw, runner, f"http://127.0.0.1:{port}"


async def test_reload_applies_a_valid_file_and_rejects_a_bad_one(sim: SimFactory, tmp_path: Path) -> None:
    """Routes move to the new file's provider; a's breaker and windows stay; a broken file changes nothing and
    the reload answers 400 with the located errors; the version is the file's hash."""
    a, b = await sim("instant", models=("up",)), await sim("instant", models=("up",))
    path = tmp_path / "gw.yaml"
    first = _write(path, a.url, b.url)
    gw, runner, url = await _start(path)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/admin/config", headers=ADMIN) as r:
                cfg = await r.json()
            assert cfg["version"] == config_version(first)
            assert cfg["fleet_versions"] == {gw.state.replica: cfg["version"]}
            async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
                assert r.headers["x-tailgate-provider"] == "a"
            client_a = gw.providers["a"].client
            second = _write(path, a.url, b.url, models={"m": {"routes": [{"provider": "b", "model": "up"}]}})
            async with s.post(f"{url}/admin/reload", headers=ADMIN) as r:
                assert r.status == 200
                out = await r.json()
            assert out["version"] == config_version(second)
            assert out["changed"]["providers_kept"] == ["a", "b"]
            assert gw.providers["a"].client is client_a  # unchanged provider: same pool
            async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
                assert r.headers["x-tailgate-provider"] == "b"
            path.write_text(path.read_text().replace("routes:", "routez:"))
            async with s.post(f"{url}/admin/reload", headers=ADMIN) as r:
                assert r.status == 400
                bad = await r.json()
            assert not bad["ok"]
            assert any("gw.yaml" in e for e in bad["errors"])
            async with s.get(f"{url}/admin/config", headers=ADMIN) as r:
                assert (await r.json())["version"] == config_version(second)  # the running config stays
            async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
                assert r.status == 200
            async with s.post(f"{url}/admin/reload") as r:
                assert r.status == 401
    finally:
        await runner.cleanup()
        await gw.close()


async def test_a_changed_provider_gets_a_new_pool_and_a_request_in_flight_finishes(
    sim: SimFactory, tmp_path: Path
) -> None:
    """A stream in flight on a's old pool completes after a reload that changes and then removes a."""
    a = await sim("instant", models=("up",), engine={"step_ms": 50.0})  # 20 tokens: ~1 s
    b = await sim("instant", models=("up",))
    path = tmp_path / "gw.yaml"
    _write(path, a.url, b.url)
    gw, runner, url = await _start(path)
    try:
        async with aiohttp.ClientSession() as s:
            body = {**BODY, "stream": True, "max_tokens": 20}
            slow = asyncio.create_task(s.post(f"{url}/v1/chat/completions", json=body))
            await asyncio.sleep(0.3)
            _write(
                path,
                a.url,
                b.url,
                providers={"b": {"base_url": b.url}},
                models={"m": {"routes": [{"provider": "b", "model": "up"}]}},
            )
            out = await gw.reloader.reload()
            assert out["changed"]["providers_removed"] == ["a"]
            resp = await slow
            text = (await resp.read()).decode()
            assert resp.status == 200
            assert "[DONE]" in text
            assert "a" not in gw.providers
    finally:
        await runner.cleanup()
        await gw.close()


async def test_sighup_reloads_a_serving_process(sim: SimFactory, tmp_path: Path) -> None:
    """`tailgate serve` + SIGHUP: the new version shows in /admin/config."""
    a, b = await sim("instant", models=("up",)), await sim("instant", models=("up",))
    path = tmp_path / "gw.yaml"
    _write(path, a.url, b.url)
    gw = ServeProcess(path)
    try:
        url = gw.root_url
        second = _write(path, a.url, b.url, models={"m": {"routes": [{"provider": "b", "model": "up"}]}})
        gw.proc.send_signal(signal.SIGHUP)
        async with aiohttp.ClientSession() as s:
            for _ in range(100):
                async with s.get(f"{url}/admin/config", headers=ADMIN) as r:
                    if (await r.json())["version"] == config_version(second):
                        break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("SIGHUP did not reload within 5 s")
    finally:
        gw.stop()


async def test_a_reload_never_changes_a_request_already_admitted(sim: SimFactory, tmp_path: Path) -> None:
    """A request reads the route table once: a reload to ``retry.max_attempts: 1`` while its first attempt is out
    leaves it its two attempts (it falls back to b and is served), while the next request gets the new table."""
    from tailgate.sim.faults import Faults

    a, b = await sim("instant", models=("up",)), await sim("instant", models=("up",))
    a.set_faults(Faults(stall_headers_s=2.0, error_rate=1.0, error_statuses=[500]))  # slow to fail, always
    path = tmp_path / "gw.yaml"
    routing = {"policy": "weighted", "probes": {"enabled": False}}
    models = {
        "m": {"routes": [{"provider": "a", "model": "up", "weight": 1}, {"provider": "b", "model": "up", "weight": 0}]}
    }
    _write(path, a.url, b.url, routing=routing, models=models, retry={"max_attempts": 2})
    gw, runner, url = await _start(path)
    try:
        async with aiohttp.ClientSession() as s:
            admitted = asyncio.create_task(s.post(f"{url}/v1/chat/completions", json=BODY))
            for _ in range(400):  # until its first attempt is out at a (bounded: 20 s)
                if gw.providers["a"].in_flight:
                    break
                await asyncio.sleep(0.05)
            assert gw.providers["a"].in_flight == 1
            _write(path, a.url, b.url, routing=routing, models=models, retry={"max_attempts": 1})
            out = await gw.reloader.reload()
            assert out["ok"]
            assert gw.routes.retry.max_attempts == 1
            resp = await admitted
            assert resp.status == 200
            assert resp.headers["x-tailgate-provider"] == "b"
            assert resp.headers["x-tailgate-attempts"] == "2"
            async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:  # arrives after: the new table
                assert r.status == 500
                assert r.headers["x-tailgate-attempts"] == "1"
    finally:
        await runner.cleanup()
        await gw.close()


async def test_reload_turns_the_filtered_retry_on_and_keeps_the_quality_board(sim: SimFactory, tmp_path: Path) -> None:
    """``routing.quality.retry_filtered`` follows the file: off, a's refusal reaches the client; reloaded on, the
    next one is answered by b. The board's counts stay across the reload (one board per gateway)."""
    a = await sim("instant", models=("up",), faults={"content_filter_rate": 1.0})
    b = await sim("instant", models=("up",))
    path = tmp_path / "gw.yaml"
    routes = [{"provider": "a", "model": "up", "weight": 1}, {"provider": "b", "model": "up", "weight": 0}]
    _write(path, a.url, b.url, models={"m": {"routes": routes}})
    gw, runner, url = await _start(path)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
                first = await r.json()
                assert r.headers["x-tailgate-provider"] == "a"
            _write(
                path,
                a.url,
                b.url,
                models={"m": {"routes": routes, "quality": {"retry_filtered": True}}},
            )
            await gw.reloader.reload()
            async with s.post(f"{url}/v1/chat/completions", json=BODY) as r:
                second = await r.json()
                assert (r.headers["x-tailgate-provider"], r.headers["x-tailgate-retried"]) == ("b", "content_filtered")
        assert first["choices"][0]["finish_reason"] == "content_filter"
        assert second["choices"][0]["message"]["content"]
        gw.books.flush()
        counts = gw.quality.board.view([("a", "up")], gw.quality.clock())[("a", "up")]["content_filter"]
        assert (counts.successes, counts.trials) == (0, 2)  # both refusals: before the reload and after
    finally:
        await runner.cleanup()
        await gw.close()
