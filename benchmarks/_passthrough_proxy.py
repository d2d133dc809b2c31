"""Floor for gateway_overhead.py: the least an aiohttp + uvloop proxy can do to relay a chat completion.

One pooled ``aiohttp.ClientSession``; the client's body is forwarded byte for byte to ``UPSTREAM`` +
path; a non-stream answer is read whole and returned, a stream is relayed as it arrives
(``iter_any()``, one write per read). No routing, no parsing, no metrics, no ledger, no timeouts
beyond aiohttp's. Usage: ``python _passthrough_proxy.py UPSTREAM_ROOT [PORT [POOL]]``; prints
``listening on http://127.0.0.1:PORT/v1`` once bound (PORT 0 picks a free one). POOL is the upstream
connection pool's size (default 256; stream_relay.py raises it to hold every stream at once).
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import uvloop
from aiohttp import web

SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)


async def relay(request: web.Request) -> web.StreamResponse:
    upstream = request.app[SESSION]
    body = await request.read()
    headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
    async with upstream.post(request.path, data=body, headers=headers) as resp:
        ctype = resp.headers.get("Content-Type", "application/json")
        if not ctype.startswith("text/event-stream"):
            return web.Response(body=await resp.read(), status=resp.status, headers={"Content-Type": ctype})
        out = web.StreamResponse(status=resp.status, headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        await out.prepare(request)
        async for data in resp.content.iter_any():
            await out.write(data)
        await out.write_eof()
        return out


async def main(upstream: str, port: int, pool: int = 256) -> None:
    connector = aiohttp.TCPConnector(limit=pool, keepalive_timeout=30.0)
    app = web.Application()
    app[SESSION] = aiohttp.ClientSession(upstream, connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    app.router.add_post("/v1/{tail:.*}", relay)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{bound}/v1", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0, *(int(x) for x in sys.argv[3:4])))
