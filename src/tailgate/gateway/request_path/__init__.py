"""The request path: the holder of what a request needs (core), its context, the route table and providers, the named
steps (proxy) and one attempt (attempts), the key gate, refusals, the token estimate, hedging, provider-key
revocation, the books and the client headers. The APIs it serves are handlers (``gateway/api_handler.py``,
``gateway/apis/``)."""
