"""The client address behind trusted proxies (gateway/access/forwarded.py): X-Forwarded-For read right to left, only
through the configured proxies."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tailgate.config.schema import ServerConfig
from tailgate.gateway.access.forwarded import TrustedProxies

NGINX = TrustedProxies(["127.0.0.1/32", "10.0.0.0/8"])


def test_no_trusted_proxies_means_the_peer() -> None:
    """With none configured the header is never read: the socket's peer is the client."""
    assert TrustedProxies().client("127.0.0.1", ["203.0.113.9"]) == "127.0.0.1"


def test_an_untrusted_peer_cannot_forge_its_address() -> None:
    """A peer outside the trusted networks is the client whatever X-Forwarded-For it sends."""
    assert NGINX.client("198.51.100.4", ["127.0.0.1", "203.0.113.9"]) == "198.51.100.4"


def test_the_rightmost_untrusted_entry_is_the_client() -> None:
    """Through nginx and an inner proxy, the client is the right-most entry outside the trusted networks;
    what the client wrote to the left of it is ignored."""
    assert NGINX.client("127.0.0.1", ["203.0.113.250, 198.51.100.4, 10.1.2.3"]) == "198.51.100.4"
    assert NGINX.client("127.0.0.1", ["203.0.113.250", "198.51.100.4"]) == "198.51.100.4"  # two header lines


def test_a_chain_of_trusted_hops_or_garbage_ends_at_the_last_trusted_hop() -> None:
    """No header: the peer. Only trusted hops: the left-most of them. A non-address: the hop that passed it on."""
    assert NGINX.client("127.0.0.1", []) == "127.0.0.1"
    assert NGINX.client("127.0.0.1", ["10.0.0.5, 10.0.0.6"]) == "10.0.0.5"
    assert NGINX.client("127.0.0.1", ["198.51.100.4, nonsense, 10.0.0.6"]) == "10.0.0.6"


def test_ipv6_and_mapped_addresses() -> None:
    """An IPv4-mapped peer counts as its IPv4 address; IPv6 entries work like IPv4 ones."""
    proxies = TrustedProxies(["127.0.0.1/32", "fd00::/8"])
    assert proxies.client("::ffff:127.0.0.1", ["2001:db8::7"]) == "2001:db8::7"
    assert proxies.client("fd00::1", ["2001:db8::7, fd00::2"]) == "2001:db8::7"


def test_config_takes_cidrs_and_comma_lists_and_refuses_the_rest() -> None:
    """server.trusted_proxies: CIDRs or bare addresses, an entry may list several (an environment variable)."""
    got = ServerConfig.model_validate({"trusted_proxies": ["127.0.0.1", "10.0.0.0/8, 172.16.0.0/12"]})
    assert got.trusted_proxies == ["127.0.0.1", "10.0.0.0/8", "172.16.0.0/12"]
    assert ServerConfig().trusted_proxies == []
    with pytest.raises(ValidationError, match="not an IP network"):
        ServerConfig.model_validate({"trusted_proxies": ["nginx"]})
