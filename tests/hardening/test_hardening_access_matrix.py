"""The access matrix: every key source × every route the gateway serves × every kind of caller, against one
table of expected answers (``EXPECTED`` here; docs/reliability.md, "The access matrix", must say the same).

A real gateway per key source, started from a YAML file (so ``POST /admin/reload`` works), its store in
tmp_path, one simulated provider behind it, served by ``HardenedSite`` as ``tailgate serve`` does (so ``/v1``
POSTs go through the front door). Each route is asked with no key, a wrong key, the team's key, the dashboard
key and the admin key; its answer must be the cell's: ``ok`` (the route's own answer — for a few routes a
400/404 chosen so that nothing changes: an unknown provider, a key id that does not exist), or the refusal's
status. The routes come from the application's own router: a route the matrix does not know fails the test.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from click.testing import CliRunner

from conftest import SimFactory, eventually
from tailgate.cli import main
from tailgate.config.resolve import load_resolved
from tailgate.gateway.app import Gateway
from tailgate.gateway.http.listener import runner_kwargs, site
from tailgate.ledger.keys import create_key, revoke_key
from tailgate.ledger.store import open_store

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "tg-matrix-admin-0123456789"
DASH = "tg-matrix-dashboard-0123456789"
METRICS = "tg-matrix-metrics-0123456789"
TEAM = "sk-matrix-team-0123456789"
WRONG = "sk-matrix-wrong-0123456789"
CALLERS = ("no key", "wrong key", "team key", "dashboard key", "admin key")
SOURCES = (
    "none",
    "YAML",
    "store at start",
    "store created at runtime",
    "tailgate keys create at runtime",
    "revoked",
    "after reload",
)
FAMILIES = ("/v1", "/v1 batches", "/admin", "/metrics", "dashboard data", "dashboard controls", "public")

# The expected answer of every (key source, family) to each caller, in CALLERS' order. docs/reliability.md
# holds the same table; test_the_doc_states_the_matrix keeps them equal.
_ALL_OK = ("ok",) * 5
_ADMIN_ONLY = ("401", "401", "401", "401", "ok")
_TEAM_ONLY = ("401", "401", "ok", "401", "401")
_READERS = ("401", "401", "401", "ok", "ok")
_TEAM_AND_ADMIN = ("401", "401", "ok", "401", "ok")
EXPECTED: dict[tuple[str, str], tuple[str, ...]] = {
    # none: no YAML keys, an empty store, no dashboard_key: open on loopback (any bearer on /v1).
    ("none", "/v1"): _ALL_OK,
    ("none", "/v1 batches"): _ALL_OK,
    ("none", "/admin"): _ADMIN_ONLY,
    ("none", "/metrics"): _ALL_OK,
    ("none", "dashboard data"): _ALL_OK,
    ("none", "dashboard controls"): _ADMIN_ONLY,
    ("none", "public"): _ALL_OK,
    # YAML: the team's key in keys:, a dashboard_key.
    ("YAML", "/v1"): _TEAM_ONLY,
    ("YAML", "/v1 batches"): _TEAM_AND_ADMIN,
    ("YAML", "/admin"): _ADMIN_ONLY,
    ("YAML", "/metrics"): _ALL_OK,
    ("YAML", "dashboard data"): _READERS,
    ("YAML", "dashboard controls"): _ADMIN_ONLY,
    ("YAML", "public"): _ALL_OK,
    # store at start: the team's key in the store before the gateway starts, a dashboard_key.
    ("store at start", "/v1"): _TEAM_ONLY,
    ("store at start", "/v1 batches"): _TEAM_AND_ADMIN,
    ("store at start", "/admin"): _ADMIN_ONLY,
    ("store at start", "/metrics"): _ALL_OK,
    ("store at start", "dashboard data"): _READERS,
    ("store at start", "dashboard controls"): _ADMIN_ONLY,
    ("store at start", "public"): _ALL_OK,
    # store created at runtime: started open (no keys, no dashboard_key), then POST /admin/keys made the team's.
    ("store created at runtime", "/v1"): _TEAM_ONLY,
    ("store created at runtime", "/v1 batches"): _TEAM_AND_ADMIN,
    ("store created at runtime", "/admin"): _ADMIN_ONLY,
    ("store created at runtime", "/metrics"): _ALL_OK,
    ("store created at runtime", "dashboard data"): _ADMIN_ONLY,
    ("store created at runtime", "dashboard controls"): _ADMIN_ONLY,
    ("store created at runtime", "public"): _ALL_OK,
    # tailgate keys create at runtime: started open, then the command (in-process, the real CLI) made the team's
    # key in the store; the gateway's poll of the store picks it up.
    ("tailgate keys create at runtime", "/v1"): _TEAM_ONLY,
    ("tailgate keys create at runtime", "/v1 batches"): _TEAM_AND_ADMIN,
    ("tailgate keys create at runtime", "/admin"): _ADMIN_ONLY,
    ("tailgate keys create at runtime", "/metrics"): _ALL_OK,
    ("tailgate keys create at runtime", "dashboard data"): _ADMIN_ONLY,
    ("tailgate keys create at runtime", "dashboard controls"): _ADMIN_ONLY,
    ("tailgate keys create at runtime", "public"): _ALL_OK,
    # revoked: the store's only key (the team's), revoked with the store's revoke (`tailgate keys revoke`).
    ("revoked", "/v1"): ("401",) * 5,
    ("revoked", "/v1 batches"): _ADMIN_ONLY,
    ("revoked", "/admin"): _ADMIN_ONLY,
    ("revoked", "/metrics"): _ALL_OK,
    ("revoked", "dashboard data"): _ADMIN_ONLY,
    ("revoked", "dashboard controls"): _ADMIN_ONLY,
    ("revoked", "public"): _ALL_OK,
    # after reload: started open, then the file gained the team's key, a dashboard_key and metrics.key.
    ("after reload", "/v1"): _TEAM_ONLY,
    ("after reload", "/v1 batches"): _TEAM_AND_ADMIN,
    ("after reload", "/admin"): _ADMIN_ONLY,
    ("after reload", "/metrics"): _ADMIN_ONLY,
    ("after reload", "dashboard data"): _READERS,
    ("after reload", "dashboard controls"): _ADMIN_ONLY,
    ("after reload", "public"): _ALL_OK,
}


@dataclass(frozen=True)
class Surface:
    """One route: how to ask it, its family, and what it answers when the caller may use it."""

    method: str
    path: str
    family: str
    ok: int = 200
    body: Any = None


CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
UNKNOWN = "no-such-alias"  # past the door: 404 model_not_found, nothing sent upstream

# Route (method, aiohttp resource) → how the matrix asks it. A route missing here fails the test.
SURFACES: dict[tuple[str, str], Surface] = {
    ("POST", "/v1/chat/completions"): Surface("POST", "/v1/chat/completions", "/v1", 200, CHAT),
    ("POST", "/v1/completions"): Surface("POST", "/v1/completions", "/v1", 404, {"model": UNKNOWN, "prompt": "hi"}),
    ("POST", "/v1/embeddings"): Surface("POST", "/v1/embeddings", "/v1", 404, {"model": UNKNOWN, "input": "hi"}),
    ("POST", "/v1/responses"): Surface("POST", "/v1/responses", "/v1", 404, {"model": UNKNOWN, "input": "hi"}),
    ("POST", "/v1/messages"): Surface("POST", "/v1/messages", "/v1", 404, {**CHAT, "model": UNKNOWN}),
    ("POST", "/v1/messages/count_tokens"): Surface(
        "POST", "/v1/messages/count_tokens", "/v1", 404, {"model": UNKNOWN, "messages": CHAT["messages"]}
    ),
    ("GET", "/v1/models"): Surface("GET", "/v1/models", "/v1"),
    # The Batch API (docs/batch.md): gateway keys, and the admin key (which sees every key's files and batches).
    ("POST", "/v1/files"): Surface("POST", "/v1/files", "/v1 batches", 400, {}),  # not a multipart upload
    ("GET", "/v1/files"): Surface("GET", "/v1/files", "/v1 batches"),
    ("GET", "/v1/files/{id}"): Surface("GET", "/v1/files/file-nope", "/v1 batches", 404),
    ("DELETE", "/v1/files/{id}"): Surface("DELETE", "/v1/files/file-nope", "/v1 batches", 404),
    ("GET", "/v1/files/{id}/content"): Surface("GET", "/v1/files/file-nope/content", "/v1 batches", 404),
    ("POST", "/v1/batches"): Surface("POST", "/v1/batches", "/v1 batches", 400, {}),  # nothing is created
    ("GET", "/v1/batches"): Surface("GET", "/v1/batches", "/v1 batches"),
    ("GET", "/v1/batches/{id}"): Surface("GET", "/v1/batches/batch_nope", "/v1 batches", 404),
    ("POST", "/v1/batches/{id}/cancel"): Surface("POST", "/v1/batches/batch_nope/cancel", "/v1 batches", 404),
    ("GET", "/admin/providers"): Surface("GET", "/admin/providers", "/admin"),
    ("POST", "/admin/providers/{name}/drain"): Surface("POST", "/admin/providers/nope/drain", "/admin", 404),
    ("POST", "/admin/providers/{name}/enable"): Surface("POST", "/admin/providers/nope/enable", "/admin", 404),
    ("GET", "/admin/keys"): Surface("GET", "/admin/keys", "/admin"),
    ("POST", "/admin/keys"): Surface("POST", "/admin/keys", "/admin", 400, {}),  # no id: nothing is created
    ("PATCH", "/admin/keys/{id}"): Surface("PATCH", "/admin/keys/nobody", "/admin", 404, {"rpm": 1}),
    ("DELETE", "/admin/keys/{id}"): Surface("DELETE", "/admin/keys/nobody", "/admin", 404),
    ("POST", "/admin/keys/{id}/revoke"): Surface("POST", "/admin/keys/nobody/revoke", "/admin", 404),
    ("GET", "/admin/config"): Surface("GET", "/admin/config", "/admin"),
    ("POST", "/admin/reload"): Surface("POST", "/admin/reload", "/admin"),  # the same file again
    ("GET", "/metrics"): Surface("GET", "/metrics", "/metrics"),
    ("GET", "/dashboard/api/catalog"): Surface("GET", "/dashboard/api/catalog", "dashboard data"),
    ("GET", "/dashboard/api/leaderboard"): Surface("GET", "/dashboard/api/leaderboard", "dashboard data"),
    ("GET", "/dashboard/api/series"): Surface("GET", "/dashboard/api/series?provider=p", "dashboard data"),
    ("GET", "/dashboard/api/heatmap"): Surface("GET", "/dashboard/api/heatmap", "dashboard data"),
    ("GET", "/dashboard/api/compare"): Surface("GET", "/dashboard/api/compare", "dashboard data"),
    ("GET", "/dashboard/api/live"): Surface("GET", "/dashboard/api/live", "dashboard data"),
    ("GET", "/dashboard/api/auth"): Surface("GET", "/dashboard/api/auth", "dashboard data"),
    ("GET", "/dashboard/api/keys"): Surface("GET", "/dashboard/api/keys", "dashboard data"),
    ("GET", "/dashboard/api/usage"): Surface("GET", "/dashboard/api/usage", "dashboard data"),
    ("GET", "/dashboard/api/batches"): Surface("GET", "/dashboard/api/batches", "dashboard data"),
    ("POST", "/dashboard/api/providers/{name}/drain"): Surface(
        "POST", "/dashboard/api/providers/nope/drain", "dashboard controls", 404
    ),
    ("POST", "/dashboard/api/providers/{name}/enable"): Surface(
        "POST", "/dashboard/api/providers/nope/enable", "dashboard controls", 404
    ),
    ("GET", "/dashboard/api/meta"): Surface("GET", "/dashboard/api/meta", "public"),
    ("GET", "/dashboard"): Surface("GET", "/dashboard", "public"),
    ("GET", "/dashboard/"): Surface("GET", "/dashboard/", "public", 308),
    ("GET", "/dashboard/keys"): Surface("GET", "/dashboard/keys", "public"),
    ("GET", "/dashboard/static"): Surface("GET", "/dashboard/static/keys.js", "public"),
    ("GET", "/healthz"): Surface("GET", "/healthz", "public"),
    ("GET", "/health"): Surface("GET", "/health", "public"),
    ("GET", "/readyz"): Surface("GET", "/readyz", "public"),
}


def _config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "admin_key": ADMIN,
        "providers": {"p": {"base_url": url, "api_keys": ["sk-up-0123456789"]}},
        "models": {"chat": {"routes": [{"provider": "p", "model": "m"}]}},
        "routing": {"probes": {"enabled": False}},
        "server": {"admin_max_failures": 1_000_000},  # the matrix sends many wrong keys on purpose
        **extra,
    }


class Served:
    def __init__(self, gw: Gateway, runner: Any, port: int) -> None:
        self.gw, self.runner, self.root = gw, runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Path], Awaitable[Served]]]:
    """Factory: a gateway started from a YAML file, served as ``tailgate serve`` serves it."""
    from aiohttp import web

    started: list[Served] = []

    async def start(path: Path) -> Served:
        config, providers = load_resolved(path)
        gw = Gateway(config, providers, config_path=path)
        await gw.start()
        runner = web.AppRunner(gw.app(), handler_cancellation=True, access_log=None, **runner_kwargs(config.server))
        await runner.setup()
        s = site(runner, "127.0.0.1", 0, config.server)
        await s.start()
        served = Served(gw, runner, s.port)
        started.append(served)
        return served

    yield start
    for s in started:
        await s.runner.cleanup()
        await s.gw.close()


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data))


async def _status(session: aiohttp.ClientSession, root: str, surface: Surface, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with session.request(
        surface.method, root + surface.path, json=surface.body, headers=headers, allow_redirects=False
    ) as r:
        await r.read()
        return r.status


async def _set_up(
    source: str, tmp_path: Path, url: str, serve: Callable[[Path], Awaitable[Served]]
) -> tuple[Served, str]:
    """Start the gateway of ``source``; return it and the token the team holds."""
    cfg, store = tmp_path / "gateway.yaml", tmp_path / "store.db"
    base = _config(url, ledger={"enabled": True, "path": str(store)})
    if source == "none":
        _write(cfg, base)
        return await serve(cfg), "sk-never-issued-0123456789"
    if source == "YAML":
        _write(cfg, {**base, "keys": [{"id": "team", "key": TEAM}], "dashboard_key": DASH})
        return await serve(cfg), TEAM
    if source in ("store at start", "revoked"):
        extra = {"dashboard_key": DASH} if source == "store at start" else {}
        _write(cfg, {**base, **extra})
        with open_store(store) as conn:
            create_key(conn, "team", secret=TEAM)
        s = await serve(cfg)
        if source == "revoked":
            with open_store(store) as conn:  # what `tailgate keys revoke team` does
                revoke_key(conn, "team")
            await eventually(lambda: _revoked(s.gw), 3.0)  # the directory's poll (0.25 s) sees it
        return s, TEAM
    if source == "store created at runtime":
        _write(cfg, base)
        s = await serve(cfg)
        async with aiohttp.ClientSession() as session:
            assert await _status(session, s.root, SURFACES[("GET", "/dashboard/api/keys")], None) == 200  # open
            async with session.post(
                s.root + "/admin/keys", json={"id": "team"}, headers={"Authorization": f"Bearer {ADMIN}"}
            ) as r:
                assert r.status == 201
                return s, (await r.json())["key"]
    if source == "tailgate keys create at runtime":
        _write(cfg, base)
        s = await serve(cfg)
        result = await asyncio.to_thread(
            CliRunner().invoke, main, ["keys", "create", "--config", str(cfg), "--id", "team"]
        )
        assert result.exit_code == 0, result.output
        secret = next(line for line in result.stdout.splitlines() if line.startswith("sk-"))
        await eventually(lambda: s.gw.key_directory.limits("team") is not None, 3.0)  # the store's poll
        return s, secret
    assert source == "after reload"
    _write(cfg, base)
    s = await serve(cfg)
    async with aiohttp.ClientSession() as session:
        assert await _status(session, s.root, SURFACES[("GET", "/dashboard/api/keys")], None) == 200  # open
        _write(cfg, {**base, "keys": [{"id": "team", "key": TEAM}], "dashboard_key": DASH, "metrics": {"key": METRICS}})
        async with session.post(s.root + "/admin/reload", headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 200, await r.text()
    return s, TEAM


def _revoked(gw: Gateway) -> bool:
    found = gw.key_directory.limits("team")
    return found is not None and found.revoked


def _routes(gw: Gateway) -> set[tuple[str, str]]:
    """Every (method, resource) the gateway's application serves (HEAD is GET's handler)."""
    app = gw.app()
    out = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "*"):
            continue
        out.add((route.method, route.resource.canonical if route.resource is not None else ""))
    return out


def _cell(want: str, surface: Surface) -> int:
    return surface.ok if want == "ok" else int(want)


@pytest.mark.timeout(60)  # ~175 requests against a real gateway and provider; a busy 2-core machine
@pytest.mark.parametrize("source", SOURCES)
async def test_access_matrix(
    source: str, sim: SimFactory, serve: Callable[[Path], Awaitable[Served]], tmp_path: Path
) -> None:
    """Every route × every caller answers as the matrix says for this key source, and the dashboard's replies
    say what the caller may do (admin or read-only), not what is configured."""
    provider = await sim("instant", models=("m",))
    served, team = await _set_up(source, tmp_path, provider.url, serve)
    routes = _routes(served.gw)
    assert routes - set(SURFACES) == set(), "a route the access matrix does not cover"
    assert set(SURFACES) - routes == set(), "the matrix names a route the gateway no longer has"
    tokens = {"no key": None, "wrong key": WRONG, "team key": team, "dashboard key": DASH, "admin key": ADMIN}
    wrong: list[str] = []
    async with aiohttp.ClientSession() as session:
        for surface in SURFACES.values():
            for caller, want in zip(CALLERS, EXPECTED[(source, surface.family)], strict=True):
                got = await _status(session, served.root, surface, tokens[caller])
                if got != _cell(want, surface):
                    wrong.append(f"{surface.method} {surface.path} with {caller}: {got}, want {_cell(want, surface)}")
        for caller in CALLERS:  # replies say what this caller may do
            headers = {"Authorization": f"Bearer {tokens[caller]}"} if tokens[caller] is not None else {}
            for path in ("/dashboard/api/auth", "/dashboard/api/keys"):
                async with session.get(served.root + path, headers=headers) as r:
                    if r.status == 200:
                        body = await r.json()
                        assert (body["admin"], body["read"]) == (caller == "admin key", True), (path, caller)
    assert wrong == [], "\n".join(wrong)


def _doc_table() -> dict[tuple[str, str], tuple[str, ...]]:
    text = (ROOT / "docs" / "reliability.md").read_text()
    block = text.split("<!-- access-matrix -->", 1)[1].split("<!-- /access-matrix -->", 1)[0]
    rows: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 + len(CALLERS) or cells[0] in ("key source", "") or set(cells[0]) <= {"-"}:
            continue
        rows[(cells[0], cells[1].strip("`"))] = tuple(re.sub(r"\*", "", c) for c in cells[2:])
    return rows


def test_the_doc_states_the_matrix() -> None:
    """docs/reliability.md's access matrix is EXPECTED, cell for cell (the doc cannot drift from the test)."""
    assert _doc_table() == EXPECTED
    assert set(EXPECTED) == {(s, f) for s in SOURCES for f in FAMILIES}
