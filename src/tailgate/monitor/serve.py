"""``tailgate monitor --serve``: the dashboard over the monitor's store, without a gateway.

The dashboard itself lives in ``tailgate.dashboard`` (a lower layer shared with the gateway, imported here as
any lower layer is: docs/architecture.md); this module only makes an aiohttp application, mounts it read-only
(no live gateway state, no controls) and runs it on a TCP site beside the probe loop.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from tailgate.dashboard import mount

__all__ = ["build_app", "start"]


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/dashboard")


def build_app(db_path: Path | str) -> web.Application:
    """An application with ``/dashboard`` (and its JSON API) over ``db_path``, ``/healthz`` and ``/ → /dashboard``."""
    app = web.Application()
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/", _root)
    mount(app, db_path)
    return app


async def start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on ``host:port`` (0 picks a free port); return the runner and the dashboard URL."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = site.port  # the bound port once started (port 0 too)
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}/dashboard"
