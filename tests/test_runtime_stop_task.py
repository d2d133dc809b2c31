"""``_runtime.stop_task``: the one way a background task is stopped (it replaced hand-written ``cancel()`` then
``await`` under ``suppress(CancelledError)``)."""

from __future__ import annotations

import asyncio

import pytest

from tailgate._runtime import stop_task


async def test_a_running_task_is_cancelled_and_waited_for() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    await stop_task(task)
    assert task.cancelled()


async def test_a_task_that_swallows_one_cancellation_is_cancelled_again() -> None:
    """A loop that takes a cancellation for a timeout and carries on is stopped by the next cancel."""
    rounds = 0

    async def stubborn() -> None:
        nonlocal rounds
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                rounds += 1
                if rounds > 1:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await stop_task(task, grace_s=0.01)
    assert task.cancelled()
    assert rounds == 2


async def test_a_failed_task_is_raised_again_only_when_asked() -> None:
    async def fails() -> None:
        raise ValueError("the loop broke")

    quiet = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await stop_task(quiet)  # logged, not raised: a background loop's close
    loud = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="the loop broke"):
        await stop_task(loud, reraise=True)  # what ``await task`` did


async def test_the_callers_own_cancellation_is_not_swallowed() -> None:
    """``suppress(CancelledError)`` around ``await task`` also swallowed a cancellation of the caller."""
    stubborn = True

    async def ignores_cancel() -> None:
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                if not stubborn:
                    raise

    inner = asyncio.create_task(ignores_cancel())
    outer = asyncio.create_task(stop_task(inner, grace_s=0.05))
    await asyncio.sleep(0.01)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert not inner.done()
    stubborn = False
    await stop_task(inner)
    assert inner.cancelled()
