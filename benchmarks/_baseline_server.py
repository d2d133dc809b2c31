"""Baseline for bench_sim.py: the least an aiohttp + uvloop server can do to answer a chat completion.

A fixed JSON body for ``"stream": false``; 20 fixed SSE token chunks (one write each) and ``[DONE]``
for ``"stream": true``. No engine, no validation. Usage: ``python _baseline_server.py [PORT]``; prints
``listening on http://127.0.0.1:PORT/v1`` once bound (PORT 0 picks a free one).
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvloop
from aiohttp import web

_HEAD = {"id": "chatcmpl-1", "created": 0, "model": "m"}
_MESSAGE = {"role": "assistant", "content": " tok" * 20}
_BODY = json.dumps(
    _HEAD
    | {"object": "chat.completion", "system_fingerprint": "baseline"}
    | {"choices": [{"index": 0, "message": _MESSAGE, "logprobs": None, "finish_reason": "length"}]}
    | {"usage": {"prompt_tokens": 1, "completion_tokens": 20, "total_tokens": 21}}
).encode()
_DELTA = {"index": 0, "delta": {"content": " tok"}, "logprobs": None, "finish_reason": None}
_CHUNK = b"data: " + json.dumps(_HEAD | {"object": "chat.completion.chunk", "choices": [_DELTA]}).encode()
_CHUNK += b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    if not json.loads(await request.read()).get("stream"):
        return web.Response(body=_BODY, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for _ in range(20):
        await resp.write(_CHUNK)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def main(port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{bound}/v1", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
