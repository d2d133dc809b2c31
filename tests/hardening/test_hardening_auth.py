"""Who gets in: one test per endpoint family (/v1, /admin, the dashboard and its API, /metrics, probes),
plus the per-address lockout after repeated wrong keys. A real gateway with keys configured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from hardening_support import ALIAS, MSG, Stack, assert_openai_error, post_json, request

CLIENT, ADMIN, DASH, METRICS = "tg-client-key", "tg-admin-key", "tg-dashboard-key", "tg-metrics-key"


def _bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key is not None else {}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(
        tmp_path_factory.mktemp("auth"),
        keys=[{"id": "app", "key": CLIENT}],
        admin_key=ADMIN,
        dashboard_key=DASH,
        metrics={"key": METRICS},
        server={"admin_max_failures": 1000},
    )
    yield s
    s.close()


def _get(stack: Stack, path: str, key: str | None) -> int:
    status, _, raw = request(stack.port, "GET", path, headers=_bearer(key))
    if status >= 400:
        assert_openai_error(status, raw)
        assert all(k not in raw.decode() for k in (CLIENT, ADMIN, DASH, METRICS))
    return status


def test_v1_needs_a_client_key(stack: Stack) -> None:
    """/v1: no key or a wrong key is a 401; the client key is served. Admin and dashboard keys are not client keys."""
    body = json.dumps({"model": ALIAS, "messages": MSG, "max_tokens": 1}).encode()
    for key, want in [(None, 401), ("nope", 401), (DASH, 401), (CLIENT, 200)]:
        status, _, raw = post_json(stack.port, "/v1/chat/completions", body, _bearer(key))
        assert status == want, (key, raw)
    assert _get(stack, "/v1/models", None) == 401
    assert _get(stack, "/v1/models", CLIENT) == 200


def test_admin_needs_the_admin_key(stack: Stack) -> None:
    """/admin: only the admin key, not the client, dashboard or metrics key."""
    for key, want in [(None, 401), (CLIENT, 401), (DASH, 401), (METRICS, 401), (ADMIN, 200)]:
        assert _get(stack, "/admin/providers", key) == want, key
    status, _, _ = request(stack.port, "POST", "/admin/providers/sim/drain", headers=_bearer(DASH))
    assert status == 401
    assert not stack.gateway.providers["sim"].drained


def test_dashboard_api_needs_the_admin_or_dashboard_key(stack: Stack) -> None:
    """With gateway keys configured every data endpoint of the dashboard needs the admin or the
    read-only dashboard key; the page shell, its assets and ``meta`` (which says a key is needed) stay public;
    the read-only key cannot drain."""
    for path in ("leaderboard", "catalog", "series?provider=sim", "heatmap", "compare", "live"):
        url = f"/dashboard/api/{path}"
        for key, want in [(None, 401), (CLIENT, 401), (METRICS, 401), (DASH, 200), (ADMIN, 200)]:
            assert _get(stack, url, key) == want, (url, key)
    status, _, raw = request(stack.port, "GET", "/dashboard/api/meta")
    assert status == 200
    assert json.loads(raw)["auth_required"] is True
    assert request(stack.port, "GET", "/dashboard")[0] == 200
    status, _, raw = request(stack.port, "GET", "/dashboard/api/auth", headers=_bearer(DASH))
    assert (status, json.loads(raw)) == (200, {"admin": False, "read": True})
    status, _, raw = request(stack.port, "GET", "/dashboard/api/auth", headers=_bearer(ADMIN))
    assert (status, json.loads(raw)["admin"]) == (200, True)
    status, _, _ = request(stack.port, "POST", "/dashboard/api/providers/sim/drain", headers=_bearer(DASH))
    assert status == 401
    assert not stack.gateway.providers["sim"].drained


def test_metrics_behind_a_bearer(stack: Stack) -> None:
    """/metrics with ``metrics.key``: that key or the admin key; nothing else."""
    for key, want in [(None, 401), (CLIENT, 401), (DASH, 401), (METRICS, 200), (ADMIN, 200)]:
        assert _get(stack, "/metrics", key) == want, key


def test_probes_stay_open(stack: Stack) -> None:
    """Load balancers and orchestrators probe without keys: /healthz, /health, /readyz."""
    for path in ("/healthz", "/health", "/readyz"):
        assert _get(stack, path, None) == 200


def test_metrics_on_its_own_port(tmp_path: Path) -> None:
    """``metrics.listen``: the main port answers 404 for /metrics; the metrics app serves it."""
    s = Stack(tmp_path, metrics={"listen": {"host": "127.0.0.1", "port": 0}})
    try:
        assert _get(s, "/metrics", None) == 404

        async def start() -> tuple[web.AppRunner, int]:
            runner = web.AppRunner(s.gateway.metrics_app())
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, site.port

        runner, port = s.call(start())
        status, _, raw = request(port, "GET", "/metrics")
        assert status == 200
        assert b"tailgate_" in raw
        assert request(port, "GET", "/v1/models")[0] == 404
        s.call(runner.cleanup())
    finally:
        s.close()


def test_dashboard_open_without_gateway_keys(tmp_path: Path) -> None:
    """No gateway keys and no dashboard key (loopback only): the dashboard reads without a key, as before."""
    s = Stack(tmp_path)
    try:
        assert _get(s, "/dashboard/api/leaderboard", None) == 200
        assert _get(s, "/metrics", None) == 200
    finally:
        s.close()


def test_closed_dashboard_without_a_reading_key_says_which_to_set(tmp_path: Path) -> None:
    """Client keys but neither admin_key nor dashboard_key: the dashboard's data is closed to everyone, and
    the 403 names the settings that open it (not "admin endpoints are off")."""
    s = Stack(tmp_path, keys=[{"id": "app", "key": CLIENT}])
    try:
        status, _, raw = request(s.port, "GET", "/dashboard/api/live", headers=_bearer(CLIENT))
        assert status == 403
        message = json.loads(raw)["error"]["message"]
        assert "dashboard_key" in message
        assert "admin_key" in message
        assert "Admin endpoints are off" not in message
        status, _, raw = request(s.port, "GET", "/admin/providers", headers=_bearer(CLIENT))
        assert status == 403
        assert json.loads(raw)["error"]["message"] == "Admin endpoints are off: set admin_key in the config."
    finally:
        s.close()


def test_wrong_keys_lock_the_address_out(tmp_path: Path) -> None:
    """server.admin_max_failures 3: after three wrong admin keys the address's wrong keys get a 429 with
    Retry-After on /admin, the dashboard API and /metrics alike; its right keys still pass (nobody can lock
    the admin out)."""
    s = Stack(
        tmp_path,
        keys=[{"id": "app", "key": CLIENT}],
        admin_key=ADMIN,
        metrics={"key": METRICS},
        server={"admin_max_failures": 3, "admin_failure_window": "60s"},
    )
    try:
        assert _get(s, "/admin/providers", ADMIN) == 200
        for _ in range(3):
            assert _get(s, "/admin/providers", "guess") == 401
        status, headers, raw = request(s.port, "GET", "/admin/providers", headers=_bearer("guess"))
        assert status == 429
        assert 1 <= int(headers["retry-after"]) <= 60
        assert "failed key checks" in assert_openai_error(status, raw)["message"]
        assert _get(s, "/dashboard/api/leaderboard", "guess") == 429
        assert _get(s, "/metrics", "guess") == 429
        assert _get(s, "/admin/providers", ADMIN) == 200
        assert _get(s, "/dashboard/api/leaderboard", ADMIN) == 200
        assert _get(s, "/metrics", METRICS) == 200
        status, _, _ = post_json(
            s.port,
            "/v1/chat/completions",
            json.dumps({"model": ALIAS, "messages": MSG, "max_tokens": 1}).encode(),
            _bearer(CLIENT),
        )
        assert status == 200  # client traffic is not locked out by admin guessing
    finally:
        s.close()


def test_forwarded_for_counts_only_from_a_trusted_proxy(tmp_path: Path) -> None:
    """Without server.trusted_proxies a client's X-Forwarded-For is ignored (rotating it does not escape the
    lockout); with the peer trusted, each forwarded address has its own count."""
    for trusted, escapes in (([], False), (["127.0.0.0/8"], True)):
        s = Stack(
            tmp_path / str(escapes),
            keys=[{"id": "app", "key": CLIENT}],
            admin_key=ADMIN,
            server={"admin_max_failures": 2, "trusted_proxies": trusted},
        )
        try:
            for i in range(4):
                status, _, _ = request(
                    s.port, "GET", "/admin/providers", headers={**_bearer("guess"), "X-Forwarded-For": "198.51.100.7"}
                )
                assert status == (401 if i < 2 else 429)
            status, _, _ = request(
                s.port, "GET", "/admin/providers", headers={**_bearer("guess"), "X-Forwarded-For": "198.51.100.8"}
            )
            assert status == (401 if escapes else 429)
        finally:
            s.close()
