"""Late Redis replies (state/link.py, ``Link.call``, ``_ours``, ``_orphan``): a reply that comes after its caller's
budget ran out, or after its caller went away, is handed to the call's reconciliation and to no one else, ends
the call (nothing left running), and raises nothing; a reply that was already in the socket, or a call whose
budget this process's own stalled loop spent, is Redis's answer. Real redis-server behind ``ReplyGate``, a proxy
that holds one reply until the test lets it through (tests/reply_gate.py): no guess about when Redis is slow.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from conftest import eventually, redis_config
from reply_gate import Held, ReplyGate, stall_until
from tailgate.state import Admission
from tailgate.state.redis import RedisState
from tailgate.state.server import RedisServer

# A 0.3 s budget and stalls that must end inside the client's 1 s socket timeout: these judge time, so they run
# on the timing worker, one at a time and untraced (tests/conftest.py).
pytestmark = pytest.mark.timing

BUDGET_S = 0.3
"""``state.timeout`` here: far above one scheduling delay of this process (so a held reply, not a busy machine,
is what ends the budget), and small enough that a stall of twice it ends inside the client's 1 s socket timeout
(``link.SYNC_TIMEOUT_S``), past which redis-py itself would drop a held call."""
LATE = "late:k"
"""The counter whose take's reply the gate holds (its name is the marker in the command's bytes)."""
OTHERS = {"a": 1.0, "b": 2.0, "c": 3.0}
"""Counters taken in Redis before the late call, each to its own usage: a reply given to the wrong caller shows."""

Replica = Callable[..., Awaitable[RedisState]]


@pytest.fixture
async def gate(redis_server: RedisServer) -> AsyncIterator[ReplyGate]:
    async with ReplyGate("127.0.0.1", redis_server.port) as g:
        yield g


@pytest.fixture
async def replica(gate: ReplyGate) -> AsyncIterator[Replica]:
    """Factory of a started replica reaching Redis through the gate (``fallback: closed`` unless given), with the
    counters of ``OTHERS`` taken in Redis. Its sync loop waits 30 s, so no sync is in flight during a test's
    stall (its own 1 s timeout would mark Redis down)."""
    made: list[RedisState] = []

    async def factory(fallback: str = "closed") -> RedisState:
        cfg = redis_config(
            gate.url, f"t{uuid.uuid4().hex[:12]}", fallback=fallback, timeout=BUDGET_S, sync_interval=30.0
        )
        s = RedisState(cfg, replica="late")
        made.append(s)
        await s.start()
        for name, amount in OTHERS.items():
            adm = await s.take(name, amount, 100, 60.0)
            assert adm.ok
            assert not adm.local
        return s

    yield factory
    for s in made:
        await s.close()


async def _settled(s: RedisState) -> None:
    """Until the late calls and the reconciliations they caused have all ended (a hang guard, not a timing)."""
    await eventually(lambda: not s._late, within_s=5.0)


async def _usages(s: RedisState) -> dict[str, float]:
    return {name: await s.usage(name, 60.0) for name in (*OTHERS, LATE)}


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged at ERROR or above: an exception raised in a loop callback is logged so, by asyncio."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_reply_past_the_budget_goes_to_its_reconciliation_and_every_caller_gets_its_own(
    replica: Replica, gate: ReplyGate, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis slower than the budget: the fallback's answer stands (closed: refused); the reply, once it comes,
    reaches the call's reconciliation (Redis's grant refunded: Redis counts nothing), the call ends, nothing is
    logged, and every call after it (one while the reply is held, the rest on the connection it freed) gets its
    own answer."""
    s = await replica()
    held = gate.hold(LATE.encode())
    adm = await s.take(LATE, 1, 10, 60.0)
    assert not adm.ok
    assert adm.local
    assert s.timeouts == 1
    other = await s.take("b", 5, 100, 60.0)  # while the late reply is held: on another connection
    assert other.ok
    assert not other.local
    assert other.remaining == 100 - 2 - 5
    await asyncio.wait_for(held.arrived.wait(), 5.0)  # Redis granted the late take; a hang guard only
    assert s._late  # the timed-out call runs on, tracked
    held.deliver()
    await _settled(s)
    assert await _usages(s) == {"a": 1, "b": 7, "c": 3, LATE: 0}
    again = await s.take(LATE, 1, 10, 60.0)
    assert again.ok
    assert not again.local
    assert again.remaining == 9
    assert _errors(caplog) == []


async def test_a_reply_to_a_caller_that_went_away_is_given_back(
    replica: Replica, gate: ReplyGate, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller cancelled (its client hung up) after Redis granted its take, before the reply came: the reply
    reaches the reconciliation, which refunds the take (nothing is kept for a request that is gone), the call
    ends, and the calls after it get their own answers."""
    s = await replica()
    s.timeout = 5.0  # the caller, not the budget, gives up first
    held = gate.hold(LATE.encode())
    call = asyncio.create_task(s.take(LATE, 4, 10, 60.0))
    await asyncio.wait_for(held.arrived.wait(), 5.0)
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert s.timeouts == 0
    assert s._late  # the abandoned call runs on, tracked
    held.deliver()
    await _settled(s)
    assert await _usages(s) == {**OTHERS, LATE: 0}
    again = await s.take(LATE, 4, 10, 60.0)
    assert again.ok
    assert not again.local
    assert again.remaining == 6
    assert _errors(caplog) == []


async def test_a_late_call_that_fails_reaches_its_reconciliation_as_lost(
    replica: Replica, gate: ReplyGate, caplog: pytest.LogCaptureFixture
) -> None:
    """The held reply is lost (its connection cut) after the budget ran out: the reconciliation gets the call as
    lost (None), never an exception in the event loop; the fallback had admitted the take, so it is charged to
    Redis (where the lost call had counted it as well: twice, never zero times); the calls after it get their own
    answers on a fresh connection."""
    s = await replica("local")
    held = gate.hold(LATE.encode())
    adm = await s.take(LATE, 1, 10, 60.0)
    assert adm.ok
    assert adm.local
    await asyncio.wait_for(held.arrived.wait(), 5.0)
    held.drop()
    await _settled(s)
    assert await _usages(s) == {**OTHERS, LATE: 2}
    assert _errors(caplog) == []


async def test_a_reply_already_in_the_socket_when_the_budget_ends_is_the_answer(
    replica: Replica, gate: ReplyGate
) -> None:
    """Redis answered within the budget, but this process's loop was busy until the budget had run out (a stall
    right after the reply reached its socket): the call takes Redis's answer (a late answer), not the fallback's
    (closed: a refusal), and leaves nothing to reconcile."""
    s = await replica()
    held = gate.hold(LATE.encode())
    call = asyncio.create_task(s.take(LATE, 1, 10, 60.0))
    await asyncio.wait_for(held.arrived.wait(), 5.0)
    held.deliver(then=lambda: stall_until(held.seen_at + BUDGET_S + 0.02))  # the budget's timer is then due
    adm = await call
    assert adm.ok
    assert not adm.local
    assert adm.remaining == 9
    assert (s.late_answers, s.timeouts, s.loop_waits) == (1, 0, 0)
    assert not s._late
    assert await _usages(s) == {**OTHERS, LATE: 1}


async def _stalled_past_the_budget(s: RedisState, gate: ReplyGate) -> tuple[asyncio.Task[Admission], Held]:
    """A take whose reply the gate holds while this process's loop stalls for twice the budget; returned once the
    call, past its budget by more than the budget, waits for Redis (``loop_waits``)."""
    held = gate.hold(LATE.encode())
    call = asyncio.create_task(s.take(LATE, 1, 10, 60.0))
    await asyncio.wait_for(held.arrived.wait(), 5.0)
    stall_until(held.seen_at + 2 * BUDGET_S + 0.1)  # the reply still held: nothing to read when the loop resumes
    await eventually(lambda: s.loop_waits == 1)  # the call waits for Redis (up to 1 s): the time was ours
    return call, held


async def test_a_call_whose_budget_the_loop_spent_is_waited_for(replica: Replica, gate: ReplyGate) -> None:
    """This process's loop stalled past twice the budget while Redis's reply was on its way: the time was the
    process's, not Redis's, so the call is waited for and takes Redis's answer, not the fallback's."""
    s = await replica()
    call, held = await _stalled_past_the_budget(s, gate)
    held.deliver()
    adm = await call
    assert adm.ok
    assert not adm.local
    assert (s.loop_waits, s.late_answers, s.timeouts) == (1, 0, 0)
    assert not s._late
    assert await _usages(s) == {**OTHERS, LATE: 1}


async def test_a_call_waited_for_that_fails_is_decided_by_the_fallback(replica: Replica, gate: ReplyGate) -> None:
    """As above, but the call waited for fails (its connection cut): the fallback decides (closed: refused) and
    the caller never sees the connection's error; the next call gets its own answer."""
    s = await replica()
    call, held = await _stalled_past_the_budget(s, gate)
    held.drop()
    adm = await call
    assert not adm.ok
    assert adm.local
    assert (s.loop_waits, s.timeouts) == (1, 0)
    again = await s.take(LATE, 1, 10, 60.0)
    assert again.ok
    assert again.remaining == 8  # Redis ran the lost call's take; with its answer lost, no one can refund it
