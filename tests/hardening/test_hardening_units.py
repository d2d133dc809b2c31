"""The small promises behind the limits and the key pool, on a fake clock (no I/O)."""

from __future__ import annotations

import pytest

from tailgate.gateway.access.lockout import SourceLockout
from tailgate.upstream.key_pool import KeyPool
from tailgate.wire import parse_json
from tailgate.wire.errors import WireError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lockout_after_max_failures_until_the_window_ends() -> None:
    """Three failures lock an address; the lock lasts until the window since the first failure ends."""
    clock = Clock()
    lock = SourceLockout(3, 60.0, clock=clock)
    for _ in range(2):
        lock.failed("10.0.0.1")
    assert lock.refusal("10.0.0.1") is None
    lock.failed("10.0.0.1")
    err = lock.refusal("10.0.0.1")
    assert err is not None
    assert err.status == 429
    assert err.headers == {"Retry-After": "60"}
    assert lock.refusal("10.0.0.2") is None  # per address
    clock.t += 59.5
    assert lock.refusal("10.0.0.1") is not None
    clock.t += 1
    assert lock.refusal("10.0.0.1") is None  # the window ended: a fresh start


def test_lockout_remembers_a_bounded_number_of_addresses() -> None:
    """Failures from many addresses never grow memory past max_sources (the oldest are forgotten)."""
    clock = Clock()
    lock = SourceLockout(1, 60.0, clock=clock, max_sources=100)
    for i in range(1000):
        clock.t += 0.001
        lock.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(lock._failures) == 100
    assert lock.refusal("10.0.3.231") is not None  # the newest is still locked


def test_key_pool_revoke_skips_the_key_and_keeps_the_last() -> None:
    """A revoked key is never handed out again; the last key in rotation cannot be revoked."""
    pool = KeyPool(["a", "b", "c"])
    assert pool.revoke(1)
    assert not pool.revoke(1)  # already out
    assert [pool.next() for _ in range(4)] == [(0, "a"), (2, "c"), (0, "a"), (2, "c")]
    assert pool.revoke(0)
    assert pool.active == 1
    assert not pool.revoke(2)  # the last one stays
    assert [pool.next() for _ in range(2)] == [(2, "c"), (2, "c")]
    assert pool.secrets == ("a", "b", "c")  # still redacted from upstream errors


def test_parse_json_errors_are_400s() -> None:
    """Not JSON, bad UTF-8 and deep nesting are each a 400 WireError, never another exception."""
    for body in (b"{", b'"\xff"', b"[" * 5000 + b"]" * 5000, b""):
        with pytest.raises(WireError) as caught:
            parse_json(body)
        assert caught.value.status == 400
    assert parse_json(b'{"a": [1]}') == {"a": [1]}
