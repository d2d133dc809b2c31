"""The one measurement core: one call to one provider through a pooled client, timed.

Gateway, bench and monitor all measure through :func:`call`, so a number means the same thing
everywhere (docs/metrics.md, "Metric definitions").
"""

from tailgate.upstream.call import Call, Tap, call
from tailgate.upstream.client import UpstreamClient
from tailgate.upstream.dialect import ANTHROPIC, OPENAI, RESPONSES, Dialect
from tailgate.upstream.endpoint import Endpoint, Timeouts, endpoint_for
from tailgate.upstream.events import Body, CallResult, Chunk, Done, ErrorClass, Event, Headers, Sent
from tailgate.upstream.http import UnsendableHeader
from tailgate.upstream.key_pool import KeyPool

__all__ = [
    "ANTHROPIC",
    "OPENAI",
    "RESPONSES",
    "Body",
    "Call",
    "CallResult",
    "Chunk",
    "Dialect",
    "Done",
    "Endpoint",
    "ErrorClass",
    "Event",
    "Headers",
    "KeyPool",
    "Sent",
    "Tap",
    "Timeouts",
    "UnsendableHeader",
    "UpstreamClient",
    "call",
    "endpoint_for",
]
