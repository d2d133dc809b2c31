"""Reconciling a Redis answer that came after the fallback decided (``redis.py``): Redis counts each decision once.

A call on the request path is bounded by ``state.timeout`` (``link.py``); past it the fallback answers the caller,
and Redis's answer, when it comes, may disagree. These settlers, run on that late answer, make Redis agree with
what this replica decided: what Redis granted but this replica did not keep is refunded to its bucket; what this
replica admitted but Redis refused (or never saw) is charged to the current bucket, for the whole fleet to see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailgate.state import _lua
from tailgate.state.protocol import Claim, Slot

__all__ = ["Reconcile", "late_reservation", "late_take"]


@dataclass(frozen=True, slots=True)
class Reconcile:
    """What reconciling does, in the background: ``adjust(name, delta, window_s, bucket=None)`` a counter in
    Redis only (the fallback's own counters already hold this replica's decision), ``release(name, token)`` a
    concurrency slot."""

    adjust: Callable[..., None]
    release: Callable[[str, str], None]


def late_take(
    reconcile: Reconcile, name: str, amount: float, window_s: float | None, decided: list[bool]
) -> Callable[[Any], None]:
    """A settler for one take (``TAKE``'s reply, or None when it failed) that the fallback decided
    (``decided[0]``; empty when the caller was cancelled and nothing was kept): granted in Redis but refused here
    → refunded to its bucket; admitted here but refused (or lost) in Redis → charged to the current bucket."""

    def settle(result: Any) -> None:
        if not amount:
            return
        here = bool(decided) and decided[0]
        granted = result is not None and bool(result[0])
        if granted and not here:
            reconcile.adjust(name, -amount, window_s, int(result[4]) if result[4] != b"-" else None)
        elif here and not granted:
            reconcile.adjust(name, amount, window_s)

    return settle


def late_reservation(
    reconcile: Reconcile, claims: Sequence[Claim], slot: Slot | None, token: str, decided: list[bool]
) -> Callable[[Any], None]:
    """A settler for one reservation (``RESERVE``'s reply for it, or None) that the fallback decided, or whose
    caller went away, as :func:`late_take` for each claim. A slot Redis granted late is always released (the
    request holds the fallback's, or none)."""

    def settle(result: Any) -> None:
        here = bool(decided) and decided[0]
        granted = result is not None and bool(result[0])
        if granted and slot is not None:
            for member in _lua.slot_members(token, slot.count):
                reconcile.release(slot.name, member)
        if granted and not here:
            for c, i in zip(claims, range(3, len(result), 5), strict=False):
                bucket = result[i + 4]
                if c.amount:
                    reconcile.adjust(c.name, -c.amount, c.window_s, int(bucket) if bucket != b"-" else None)
        elif here and not granted:
            for c in claims:
                if c.amount:
                    reconcile.adjust(c.name, c.amount, c.window_s)

    return settle
