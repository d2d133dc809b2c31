"""The gateway's front door: every byte a client sends arrives here, and every answer leaves from here.

Two servers share one port. The lean front door (httptools on a bare asyncio protocol) serves the ``/v1`` POSTs,
the hot path; aiohttp serves every other request, and a connection the lean door does not serve is handed to
aiohttp's handler from the request's first byte. ``server.http_front: aiohttp`` sends everything through aiohttp.
Both answer the refusals of HTTP from one table (``wire.http_refusals``) and carry the proxy's requests as one
``Exchange``; ``tests/gateway/test_http_contract.py`` runs the same status-code contract against every path of both.

- ``exchange``: the request and its answer as the proxy sees them (``Exchange``, ``Reply``, ``Stream``), the
  request deadline both servers keep; no server imported.
- ``aiohttp_exchange``: the proxy's handlers as aiohttp routes, and the deadline middleware.
- ``lean_connection``: the lean front door's connection (parse, dispatch, hand-over, timers, graceful stop).
- ``lean_reply``: what it writes (heads, whole replies, the chunked stream, a loop turn's write batch).
- ``listener``: the listening site (connection cap, which protocol a connection gets) and the runner's limits.

aiohttp's private attributes are touched in one module only, ``tailgate._aiohttp_internals`` (the site's protocol
factory, the hand-over, the parse errors' shape), shared with the simulator's site; this package uses its public
API.
"""
