"""A provider key the provider refuses (401 / 403): out of the key pool, an alert, the other keys used.

A revoked or mistyped key among several is the commonest self-inflicted outage of a multi-key
provider: round-robin would fail every n-th request forever. The first 401/403 on a key takes it out of
rotation (``KeyPool.revoke``), logs a warning naming the provider and the key's *index* (never the
key), counts ``tailgate_provider_keys_revoked_total{provider}``, and the same request is sent again with
the next key. The last key is never taken out: with nothing better to send, its 401 goes to the client.
A restart (or a config reload) brings revoked keys back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prometheus_client import Counter

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.upstream import CallResult

log = logging.getLogger("tailgate.gateway")

_REFUSED = frozenset({401, 403})


def revoke_refused_key(provider: ProviderState, result: CallResult, counter: Counter) -> bool:
    """True when ``result`` was a 401/403 on a key that is now out of rotation and another key remains
    (the caller then retries the same route)."""
    if result.status not in _REFUSED or result.key_index is None:
        return False
    keys = provider.client.keys
    if not keys.revoke(result.key_index):
        return False
    counter.labels(provider.name).inc()
    log.warning(
        "provider %s refused API key #%d (HTTP %s): taken out of the key pool, %d of %d keys left in rotation",
        provider.name,
        result.key_index,
        result.status,
        keys.active,
        len(keys),
    )
    return True
