"""The open loop's alarm: a ``perf_counter`` deadline kept to the microsecond with a Linux timerfd, without
spinning; elsewhere (no timerfd) the event loop's own timers (millisecond-coarse)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

# Linux timerfd (sys/timerfd.h): CLOCK_MONOTONIC is perf_counter's clock on Linux.
_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_timerfd() -> Any | None:
    """libc, when it has timerfd and ``perf_counter`` reads CLOCK_MONOTONIC (Linux); otherwise None."""
    if not sys.platform.startswith("linux"):
        return None
    if "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
    except (OSError, AttributeError):
        return None
    return libc


class Alarm:
    """Calls back (or wakes a coroutine) at a ``perf_counter`` time, to the microsecond, without spinning.

    ``loop.call_at`` / ``asyncio.sleep`` are millisecond-coarse on uvloop (delays are rounded to whole
    ms and measured from the loop's cached clock; a delay under 0.5 ms becomes ``call_soon``), which put
    up to a millisecond of lag on every open-loop send. On Linux the alarm is a ``timerfd`` armed at the
    absolute time and watched by the loop like a socket: the callback runs in the same loop turn that
    sees the timer expire. Elsewhere it falls back to the loop's timers. It never fires early.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, callback: Callable[[], None] | None = None
    ) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._callback = callback
        self._fd = -1
        self._at = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._libc = _libc_timerfd()
        self._spec = _Itimerspec()
        if self._libc is not None:
            fd = int(self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
            if fd >= 0:
                self._fd = fd
                self._loop.add_reader(fd, self._fired)

    @property
    def precise(self) -> bool:
        """True when the alarm is a timerfd (microsecond wake-ups); False on the coarse fallback."""
        return self._fd >= 0

    def arm(self, t: float) -> None:
        """Fire once at ``t`` (``perf_counter`` seconds), replacing any earlier time."""
        self._at = t
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd >= 0 and self._settime(t):
            return
        self._handle = self._loop.call_later(max(0.0, t - time.perf_counter()), self._fired)

    async def until(self, t: float) -> None:
        """Return once ``time.perf_counter() >= t`` (for an alarm made without a callback)."""
        while time.perf_counter() < t:
            waiter = self._loop.create_future()
            self._waiter = waiter
            self.arm(t)
            try:
                await waiter
            finally:
                self._waiter = None

    def _settime(self, t: float) -> bool:
        sec = int(t)
        value = self._spec.it_value
        value.tv_sec = sec
        value.tv_nsec = min(999_999_999, int((t - sec) * 1e9))
        assert self._libc is not None
        return int(self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)) == 0

    def _fired(self) -> None:
        self._handle = None
        if self._fd >= 0:
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 8)
        if time.perf_counter() < self._at:  # a stale expiry, or the fallback timer's rounding: not yet
            self.arm(self._at)
            return
        self._at = float("inf")  # fired: a stale readiness later does nothing
        if self._callback is not None:
            self._callback()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
