"""Who the client is behind a reverse proxy: ``server.trusted_proxies`` (CIDRs) and ``X-Forwarded-For``.

The socket's peer is the client unless it is a trusted proxy; then the client is the right-most address of the
``X-Forwarded-For`` chain that is not itself a trusted proxy. Each proxy appends the address it saw at the right
(nginx's ``$proxy_add_x_forwarded_for``), so everything left of the right-most untrusted entry was written by
whoever sent the request and proves nothing; an untrusted peer's header is never read (anyone could send one).
An entry that is not an IP address ends the walk at the trusted hop that forwarded it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

__all__ = ["TrustedProxies"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> _Address | None:
    """``text`` as an IP address (an IPv4-mapped IPv6 address as its IPv4 one), or None when it is not one."""
    try:
        got = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(got, ipaddress.IPv6Address) and got.ipv4_mapped is not None:
        return got.ipv4_mapped
    return got


class TrustedProxies:
    """The configured proxies' networks and the one question asked of them: which address is the client's?"""

    __slots__ = ("networks",)

    def __init__(self, cidrs: Iterable[str] = ()) -> None:
        self.networks: tuple[_Network, ...] = tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)

    def trusted(self, address: _Address) -> bool:
        return any(address in net for net in self.networks)

    def client(self, peer: str | None, forwarded_for: Sequence[str]) -> str | None:
        """The client's address for a request from socket peer ``peer`` carrying the ``X-Forwarded-For``
        header values ``forwarded_for`` (every occurrence, in order: they are one comma-separated list)."""
        if not self.networks or peer is None:
            return peer
        hop = _address(peer)
        if hop is None or not self.trusted(hop):
            return peer
        chain = [part for value in forwarded_for for part in value.split(",") if part.strip()]
        for entry in reversed(chain):
            got = _address(entry)
            if got is None:
                break  # garbage a trusted hop passed on: the client is that hop
            hop = got
            if not self.trusted(got):
                break
        return str(hop)
