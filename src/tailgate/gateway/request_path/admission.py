"""Per-key admission: models, expiry, tpm, concurrency and budgets — reserve, then settle (rpm: gateway.fleet).

At admission (``admit``) a request reserves what it may use: tokens = the prompt's upper bound
(``estimate.prompt_bound``) + ``max_tokens`` (or ``routing.pacing.default_max_tokens``) × ``n``, and
money = those tokens at the highest price among the alias's routes. The reservation is taken, all or
nothing, from the key's counters in the fleet state (``tailgate.state``: exact across replicas with
Redis): ``tpm`` over a 60 s sliding window, token and money budgets per UTC day and calendar month
(running totals named after their period), and a
``max_concurrency`` slot. When the request ends (``settle``) each counter is corrected to what the
ledger records — prompt tokens (the estimate when the provider never said), output tokens (counted
from the chunks of a stream cut short or cancelled) and their cost — and the slot is given back. So a
cut stream is charged for what it produced: never zero, never the whole reservation.

Refusals are OpenAI-shaped (docs/keys.md): ``403 model_not_allowed``; ``429`` with ``Retry-After`` for
rpm / tpm / concurrency; ``429 budget_exceeded`` (Retry-After: until the period resets); ``401`` for an
expired key. Each is counted in ``tailgate_key_refusals_total{key, reason}`` and recorded in the ledger
row's ``outcome`` (the reason).

With the ``local`` state backend a budget counter starts, the first time a process uses it, from the
key's spend in the store for that period (so a restart does not reset budgets); with Redis the counters
live in Redis and survive replica restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter

from tailgate.config.schema import GatewayConfig
from tailgate.gateway.access.key_directory import KeyDirectory, KeyLimits
from tailgate.ledger.paths import default_db_path
from tailgate.ledger.store import open_store
from tailgate.ledger.usage import day_start, month_start, next_day, next_month, spend
from tailgate.state import Adjustment, Admission, Claim, Lease, LocalState, Reservation, SharedState, Slot
from tailgate.state.allowance import Allowances
from tailgate.wire.errors import WireError

__all__ = ["REASONS", "KeyAdmission", "KeyRefused", "Ticket", "key_store", "ratelimit_headers"]

log = logging.getLogger("tailgate.gateway")

Reason = Literal[
    "model_not_allowed",
    "key_expired",
    "key_revoked",
    "rpm_limited",
    "tpm_limited",
    "concurrency_limited",
    "budget_exceeded",
]
REASONS: tuple[Reason, ...] = get_args(Reason)
Kind = Literal["requests", "tokens", "cost"]
_Period = tuple[str, Kind, float, float, str, float]
"""A budget: (counter name, kind, limit, period start, "daily" / "monthly", when it resets: Unix seconds)."""


def budget_refusal(word: str, kind: str, need: float, remaining: float, limit: float, ends: float, reset: float) -> str:
    """Why a budget refused a request, in words: used up, or not enough left for this request's reservation
    (what is left may be above zero: the reservation, prompt + ``max_tokens``, is what did not fit)."""
    left = max(0.0, remaining)
    if kind == "tokens":
        amounts, what = (f"{left:.0f}", f"{limit:g} tokens"), f"{need:.0f} tokens (prompt + max_tokens)"
    else:
        amounts = (f"{left:.6g}", f"{limit:g}")
        what = f"up to {need:.6g} of spend (prompt + max_tokens at the dearest route's price)"
    when = "00:00 UTC" + ("" if word == "daily" else time.strftime(" on %Y-%m-%d", time.gmtime(ends)))
    resets = f"It resets at {when}, in {duration_words(reset)}."
    if left <= 0.0:
        return f"The {word} budget of this key is used up ({amounts[0]} of {amounts[1]} left). {resets}"
    return (
        f"The {word} budget of this key cannot cover this request: it reserves {what}, "
        f"and {amounts[0]} of {amounts[1]} are left. {resets}"
    )


def duration_words(seconds: float) -> str:
    """``30 s``, ``12 min``, ``7 h 34 min``, ``24 d 7 h``: a wait as a person reads it (minutes rounded)."""
    if seconds < 59.5:
        return f"{math.ceil(seconds)} s"
    minutes = round(seconds / 60.0)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@dataclass(slots=True)
class _Plan:
    """What a key's requests reserve, worked out once per key and UTC day instead of once per request: the
    claims (counter name, kind, limit, window), its budgets and its concurrency slot. Valid while the key
    directory hands out the same ``limits`` (a reload or a key change makes a new object) and the day lasts
    (budget counters are named after their period)."""

    limits: KeyLimits
    day: float
    parts: tuple[tuple[str, Kind, float, float | None], ...]
    periods: list[_Period]
    slot: Slot | None
    seeded: bool = False
    """The local state's budget counters were started from the store's spend (``_seed``)."""


@dataclass(slots=True)
class _Take:
    name: str
    window_s: float | None
    kind: Kind
    amount: float
    bucket: int | None


@dataclass(slots=True)
class Ticket:
    """What one request reserved; ``settle`` corrects it to the actual usage exactly once."""

    key_id: str
    tokens: float
    cost: float
    prompt_estimate: float
    takes: list[_Take] = field(default_factory=list)
    lease: tuple[str, str] | None = None
    settled: bool = False
    tpm: Admission | None = None
    """The tpm window's answer (for ``x-ratelimit-*-tokens``); None without a tpm."""


def key_store(config: GatewayConfig, ledger_path: Path | None) -> str | Path | None:
    """Where runtime keys live: ``ledger.url``, else the ledger's SQLite file; None with the ledger off."""
    if config.ledger.url:
        return config.ledger.url
    if not config.ledger.enabled:
        return None
    return ledger_path or (Path(config.ledger.path).expanduser() if config.ledger.path else default_db_path())


def _error(status: int, message: str, code: str, kind: str, retry_after: float | None = None) -> WireError:
    err = WireError(status, message, type=kind, code=code)
    if retry_after is not None:
        err.headers = {"Retry-After": str(max(1, math.ceil(min(retry_after, 86400.0 * 31))))}
    return err


class KeyRefused(Exception):
    """A key's limit refused the request: ``error`` is the client's answer, ``reason`` the ledger outcome."""

    def __init__(self, reason: Reason, error: WireError) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


class KeyAdmission:
    """Admission and settlement of requests made with keys that carry limits (see the module docstring)."""

    def __init__(
        self,
        directory: KeyDirectory,
        state: Callable[[], SharedState | None],
        registry: CollectorRegistry,
        *,
        store: str | Path | None = None,
        clock: Callable[[], float] = time.time,
        allowances: bool = True,
    ) -> None:
        self.directory = directory
        self._allowances = allowances
        """Admit from allowances held (``state/allowance.py``) with a backend that has round trips; False:
        every request reserves and settles in the backend (the exhausted-allowance path, for benchmarks)."""
        self._fleet = state
        self._own = LocalState()  # until (or unless) the gateway has a fleet state
        self._store = store
        self._clock = clock
        self._seeded: set[str] = set()
        self._plans: dict[str, _Plan] = {}
        self._seed_lock = asyncio.Lock()
        self._pending: set[asyncio.Task[None]] = set()
        self._allow: Allowances | None = None
        """Allowances held with a fleet state (``state/allowance.py``): most requests make no Redis call."""
        self._calendar = (0.0, 0.0, 0.0, 0.0)  # (UTC day start, next day, month start, next month)
        self.refusals = Counter(
            "tailgate_key_refusals",
            "Requests refused by a key's own limits, by key id and reason (model_not_allowed, key_expired, "
            "key_revoked, rpm_limited, tpm_limited, concurrency_limited, budget_exceeded).",
            ["key", "reason"],
            registry=registry,
        )
        self._m_allow = Counter(
            "tailgate_state_allowance_reservations",
            "Key reservations in a fleet by how they were answered (state/allowance.py): local (from allowances "
            "held, no Redis call), remote (waited for Redis: an allowance exhausted or a limit decided per "
            "request), refusal_remembered (refused from a remembered Redis refusal, no Redis call).",
            ["how"],
            registry=registry,
        )
        self._m_renewals = Counter(
            "tailgate_state_allowance_renewals",
            "Background takes that renewed an allowance slice ahead of need (no request waited for them).",
            registry=registry,
        )
        self._counted_allow: tuple[Allowances | None, dict[str, int]] = (None, {})

    def refresh_metrics(self) -> None:
        """Bring the allowance counters up to date (at scrape); a new ``Allowances`` (a new state) counts on."""
        allow = self._allow
        if allow is None:
            return
        now = {
            "local": allow.local,
            "remote": allow.remote,
            "refusal_remembered": allow.refusals_remembered,
            "renewals": allow.renewals,
        }
        held, counted = self._counted_allow
        if held is not allow:
            counted = {}
        for how in ("local", "remote", "refusal_remembered"):
            self._m_allow.labels(how).inc(now[how] - counted.get(how, 0))
        self._m_renewals.inc(now["renewals"] - counted.get("renewals", 0))
        self._counted_allow = (allow, now)

    # -- admission ----------------------------------------------------------------------------------

    async def admit(
        self,
        key_id: str | None,
        alias: str,
        prompt_estimate: float,
        output_estimate: float,
        price: tuple[float, float],
        limits: KeyLimits | None = None,
        *,
        budgets_only: bool = False,
    ) -> Ticket | None:
        """Reserve for one request of ``key_id`` or raise the refusal (a ``WireError`` whose ``code`` is
        the reason); None when the key has nothing to check. ``price`` is (input, output) per million;
        ``limits``: the key's, when the caller looked them up already. ``budgets_only``: the key's token and money
        budgets alone, no tpm window or concurrency slot (a line of a provider's batch job: it uses no live rate and
        holds no connection, but it spends)."""
        if key_id is None:
            return None
        if limits is None:
            limits = self.directory.limits(key_id)
        if limits is None or not limits.limited:
            return None
        now = self._clock()
        self._check(limits, alias, now)
        tokens = prompt_estimate + output_estimate
        cost = (prompt_estimate * price[0] + output_estimate * price[1]) / 1_000_000
        ticket = Ticket(key_id, tokens, cost, prompt_estimate)
        state = self._state()
        plan = self._plan(limits, now)
        if plan.periods and not plan.seeded and state.backend == "local" and self._store is not None:
            await self._seed(state, key_id, plan.periods)
            plan.seeded = True
        # The tpm, every budget and the concurrency slot at once (``SharedState.reserve``: one Redis round trip,
        # all or nothing; the local state answers at once, without a coroutine).
        parts, slot = plan.parts, plan.slot
        if budgets_only:
            parts, slot = tuple(p for p in parts if p[3] is None), None  # windowless parts: the budgets
        claims = [Claim(name, cost if kind == "cost" else tokens, limit, w) for name, kind, limit, w in parts]
        try:
            if isinstance(state, LocalState):
                res = state.reserve_now(claims, slot)
            elif not self._allowances or state.backend == "local":  # no round trips to save
                res = await state.reserve(claims, slot)
            else:
                allow = self.allowances(state)
                now_res = allow.reserve_now(claims, slot)
                res = now_res if now_res is not None else await allow.reserve(claims, slot)
            self._book(limits, plan, ticket, claims, res, parts, slot)
        except BaseException:
            await self._undo(state, ticket)
            raise
        return ticket

    def check(self, key_id: str, alias: str, limits: KeyLimits | None = None) -> None:
        """The key's standing, before anything is counted: expired (401 ``key_expired``) or not allowed this
        model (403 ``model_not_allowed``) raises the refusal; neither takes from any counter."""
        if limits is None:
            limits = self.directory.limits(key_id)
        if limits is not None and limits.limited:
            self._check(limits, alias, self._clock())

    def _check(self, limits: KeyLimits, alias: str, now: float) -> None:
        key_id = limits.id
        if limits.expires_at is not None and now >= limits.expires_at:
            raise self._refuse(
                key_id, "key_expired", _error(401, "This API key has expired.", "key_expired", "invalid_request_error")
            )
        if limits.models is not None and alias not in limits.models:
            allowed = ", ".join(sorted(limits.models)) or "none"
            err = _error(
                403,
                f"This key may not use the model '{alias}' (allowed: {allowed}).",
                "model_not_allowed",
                "invalid_request_error",
            )
            raise self._refuse(key_id, "model_not_allowed", err)

    def _state(self) -> SharedState:
        return self._fleet() or self._own

    def allowances(self, state: SharedState) -> Allowances:
        """The allowances held from ``state`` (a fleet state; made, and its ticks started, on first use)."""
        allow = self._allow
        if allow is None or allow.state is not state:
            allow = self._allow = Allowances(state)
            allow.start()
        return allow

    def _held(self, state: SharedState) -> Allowances | None:
        allow = self._allow
        return allow if allow is not None and allow.state is state else None

    def _refuse(self, key_id: str, reason: Reason, error: WireError) -> KeyRefused:
        return KeyRefused(self.refused(key_id, reason), error)

    def refused(self, key_id: str | None, reason: Reason) -> Reason:
        """Count one refusal of ``key_id`` for ``reason`` (also for the rpm check in gateway.fleet); return it."""
        self.refusals.labels(key_id or "-", reason).inc()
        return reason

    def _book(
        self,
        limits: KeyLimits,
        plan: _Plan,
        ticket: Ticket,
        claims: list[Claim],
        res: Reservation,
        parts: tuple[tuple[str, Kind, float, float | None], ...],
        slot: Slot | None,
    ) -> None:
        """Write what ``res`` took for ``parts`` (of ``plan``) and ``slot`` into ``ticket``, or raise the refusal of
        the first limit that said no."""
        if not res.ok:
            raise self._refusal(limits, ticket, claims, plan.periods, res)
        ticket.takes = [
            _Take(c.name, c.window_s, part[1], c.amount, adm.bucket)
            for c, part, adm in zip(claims, parts, res.admissions, strict=True)
        ]
        if limits.tpm is not None and res.admissions and parts[0][3] is not None:
            ticket.tpm = res.admissions[0]  # the tpm is the plan's first part (``_plan``)
        if res.lease is not None and slot is not None:
            ticket.lease = (slot.name, res.lease.token)

    def _plan(self, limits: KeyLimits, now: float) -> _Plan:
        """The key's plan for today (made on a key's first request of a UTC day, or after its limits changed)."""
        cal = self._calendar
        if not cal[0] <= now < cal[1]:  # a new UTC day (months begin on one): once a day, not per request
            cal = self._calendar = (day_start(now), next_day(now), month_start(now), next_month(now))
        plan = self._plans.get(limits.id)
        if plan is not None and plan.limits is limits and plan.day == cal[0]:
            return plan
        kid = limits.id
        parts: list[tuple[str, Kind, float, float | None]] = []
        if limits.tpm is not None:
            parts.append((f"key:{kid}:tpm", "tokens", float(limits.tpm), 60.0))
        periods = self._periods(limits) if limits.budgeted else []
        parts.extend((name, kind, limit, None) for name, kind, limit, *_ in periods)
        slot = Slot(f"key:{kid}:concurrency", limits.max_concurrency) if limits.max_concurrency is not None else None
        seeded = all(p[0] in self._seeded for p in periods)
        plan = self._plans[kid] = _Plan(limits, cal[0], tuple(parts), periods, slot, seeded)
        return plan

    def _refusal(
        self, limits: KeyLimits, ticket: Ticket, claims: list[Claim], periods: list[_Period], res: Reservation
    ) -> KeyRefused:
        """The OpenAI-shaped refusal of the part of ``res`` that said no (docs/keys.md)."""
        kid = limits.id
        refused = res.refused
        if isinstance(refused, Lease) or refused is None:
            in_use = refused.in_use if refused is not None else 0
            err = _error(
                429,
                f"This key already has {in_use} requests in flight (max_concurrency "
                f"{limits.max_concurrency}). Retry after 1s.",
                "concurrency_limit_exceeded",
                "requests",
                1.0,
            )
            return self._refuse(kid, "concurrency_limited", err)
        claim = claims[len(res.admissions) - 1]
        if claim.window_s is not None:  # the tpm
            wait = refused.retry_after_s if math.isfinite(refused.retry_after_s) else 60.0
            err = _error(
                429,
                f"Token rate limit of this key reached: this request reserves {ticket.tokens:.0f} tokens "
                f"(prompt + max_tokens), more than the {max(0.0, refused.remaining):.0f} of its {limits.tpm:g} "
                f"per minute free now. Retry after {wait:.1f}s.",
                "rate_limit_exceeded",
                "tokens",
                wait,
            )
            return self._refuse(kid, "tpm_limited", err)
        _, kind, limit, _, word, ends = next(p for p in periods if p[0] == claim.name)
        reset = max(0.0, ends - self._clock())
        err = _error(
            429,
            budget_refusal(word, kind, claim.amount, refused.remaining, limit, ends, reset),
            "budget_exceeded",
            "insufficient_quota",
            reset,
        )
        return self._refuse(kid, "budget_exceeded", err)

    def _periods(self, limits: KeyLimits) -> list[_Period]:
        """(counter, kind, limit, period start, period word, when it resets) for each budget of the key."""
        day, day_end, month, month_end = self._calendar
        out: list[_Period] = []
        for limit, kind, start, word, end in (
            (limits.tokens_per_day, "tokens", day, "daily", day_end),
            (limits.tokens_per_month, "tokens", month, "monthly", month_end),
            (limits.cost_per_day, "cost", day, "daily", day_end),
            (limits.cost_per_month, "cost", month, "monthly", month_end),
        ):
            if limit is not None:
                name = f"key:{limits.id}:budget:{kind}:{word}:{int(start)}"
                out.append((name, kind, float(limit), start, word, end))  # type: ignore[arg-type]
        return out

    async def _seed(self, state: SharedState, key_id: str, periods: list[_Period]) -> None:
        """Local state: start each budget counter from the store's spend for its period (once per process)."""
        todo = [p for p in periods if p[0] not in self._seeded]
        if not todo:
            return
        async with self._seed_lock:
            todo = [p for p in todo if p[0] not in self._seeded]
            for name, kind, _, start, _, _ in todo:
                try:
                    tokens, cost = await asyncio.to_thread(self._spend_sync, key_id, start)
                except Exception as exc:
                    log.warning(
                        "keys: cannot read the spend of %s from the store (%s); its budget counts from 0", key_id, exc
                    )
                    tokens, cost = 0, 0.0
                spent = tokens if kind == "tokens" else cost
                if spent:
                    await state.adjust(name, spent, None)
                self._seeded.add(name)

    def _spend_sync(self, key_id: str, since: float) -> tuple[int, float]:
        assert self._store is not None
        with open_store(self._store, connect_timeout=2.0) as conn:
            return spend(conn, key_id, since=since)

    async def _undo(self, state: SharedState, ticket: Ticket) -> None:
        """Give back what a refused (or failed) admission had taken."""
        refunds = [Adjustment(t.name, -t.amount, t.window_s, t.bucket) for t in ticket.takes]
        lease, ticket.lease = ticket.lease, None
        ticket.takes.clear()
        ticket.settled = True
        allow = self._held(state)
        if allow is not None:  # back into the allowances (no round trip); counters decided per request: now
            refunds = allow.settle_now(refunds)
            if lease is not None and allow.release_now(*lease):
                lease = None
            if lease is None and not refunds:
                return
        await state.settle(refunds, lease)

    # -- x-ratelimit-* ---------------------------------------------------------------------------------

    def headers(
        self,
        key_id: str,
        rpm: float | None,
        rpm_adm: Admission | None,
        ticket: Ticket | None,
        limits: KeyLimits | None = None,
    ) -> dict[str, str]:
        """``x-ratelimit-*`` of an admitted request of ``key_id`` (empty for a key without rpm or tpm)."""
        if limits is None:
            limits = self.directory.limits(key_id)
        tpm = limits.tpm if limits is not None else None
        return ratelimit_headers(rpm, rpm_adm, tpm, ticket.tpm if ticket is not None else None)

    async def headers_now(self, key_id: str, rpm: float | None, known: Mapping[str, str]) -> dict[str, str]:
        """``x-ratelimit-*`` of ``key_id`` as its windows stand now (a refused request's answer: asks the
        windows with an amount of 0, which takes nothing), but for what the refusal ``known`` carries already.
        With a shared state a refusal that carries its window's numbers (the rpm's 429) asks nothing more: a
        flood over the rpm must not cost a Redis round trip per refusal (``LeasedLimiter`` spares it); the tpm
        window comes from the allowances when they know it (a remembered refusal, a slice held: no call)."""
        limits = self.directory.limits(key_id)
        tpm = limits.tpm if limits is not None else None
        state = self._state()
        if "x-ratelimit-limit-requests" in known:
            if not isinstance(state, LocalState):
                return {}
            rpm = None
        if rpm is None and tpm is None:
            return {}
        rpm_adm = await state.take(f"key:{key_id}:rpm", 0.0, rpm, 60.0) if rpm is not None else None
        tpm_adm: Admission | None = None
        if tpm is not None:
            allow = None if isinstance(state, LocalState) else self._held(state)
            if allow is not None:  # the remembered refusal or the slice held: no Redis call
                tpm_adm = allow.known(f"key:{key_id}:tpm", float(tpm))
            if tpm_adm is None:
                tpm_adm = await state.take(f"key:{key_id}:tpm", 0.0, float(tpm), 60.0)
        return ratelimit_headers(rpm, rpm_adm, tpm, tpm_adm)

    # -- settlement -----------------------------------------------------------------------------------

    def free_slot_now(self, ticket: Ticket | None) -> bool:
        """The request's answer is out: give its ``max_concurrency`` slot back now, before its books (the key's
        next request may come on the same connection at once). True when nothing is held any more; False
        when that needs a round trip to the fleet's state (the slot then goes back with the settlement)."""
        if ticket is None or ticket.lease is None:
            return True
        state = self._state()
        if not isinstance(state, LocalState):
            allow = self._held(state)
            if allow is not None and allow.release_now(*ticket.lease):
                ticket.lease = None
                return True
            return False
        state.release_now(*ticket.lease)
        ticket.lease = None
        return True

    def settle(self, ticket: Ticket, prompt_tokens: int | None, output_tokens: int | None, cost: float | None) -> None:
        """Correct the reservation to the ledger's numbers (from the request's bookkeeping; never blocks)."""
        if ticket.settled:
            return
        ticket.settled = True
        state = self._state()
        if isinstance(state, LocalState):  # never waits: no task per request
            state.settle_now(self._fixes(ticket, prompt_tokens, output_tokens, cost), ticket.lease)
            return
        fixes = self._fixes(ticket, prompt_tokens, output_tokens, cost)
        allow = self._held(state)
        if allow is not None:  # into the allowances; counters decided per request are settled now, as before
            fixes = allow.settle_now(fixes)
            if ticket.lease is not None and allow.release_now(*ticket.lease):
                ticket.lease = None
            if ticket.lease is None and not fixes:
                return
        task = asyncio.get_running_loop().create_task(self._settle(fixes, ticket.lease))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _settle(self, fixes: list[Adjustment], lease: tuple[str, str] | None) -> None:
        await self._state().settle(fixes, lease)

    @staticmethod
    def _fixes(
        ticket: Ticket, prompt_tokens: int | None, output_tokens: int | None, cost: float | None
    ) -> list[Adjustment]:
        """The corrections that make each of ``ticket``'s takes what the ledger row says it used."""
        actual_tokens = (prompt_tokens or 0) + (output_tokens or 0)  # exactly what the ledger row says
        actual = {"tokens": actual_tokens, "cost": cost or 0.0}
        return [
            Adjustment(t.name, delta, t.window_s, t.bucket if delta < 0 else None)
            for t in ticket.takes
            if t.kind != "requests" and (delta := actual[t.kind] - t.amount)
        ]

    async def close(self) -> None:
        """Wait for settlements in flight, then give back the allowances (the gateway closes this after
        draining its requests, before the fleet state)."""
        if self._pending:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._pending, return_exceptions=True)
        if self._allow is not None:
            with contextlib.suppress(Exception):
                await self._allow.close()


def ratelimit_headers(
    rpm: float | None, rpm_adm: Admission | None, tpm: float | None, tpm_adm: Admission | None
) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for a key's rpm and tpm windows
    (docs/keys.md): the limit, what is left in the window after this request, and the seconds until the
    window's usage has rolled off."""
    out: dict[str, str] = {}
    if rpm is not None and rpm_adm is not None:
        out["x-ratelimit-limit-requests"] = f"{rpm:g}"
        out["x-ratelimit-remaining-requests"] = str(max(0, math.floor(rpm_adm.remaining)))
        out["x-ratelimit-reset-requests"] = f"{max(0.0, rpm_adm.reset_s):.3f}s"
    if tpm is not None and tpm_adm is not None:
        out["x-ratelimit-limit-tokens"] = f"{tpm:g}"
        out["x-ratelimit-remaining-tokens"] = str(max(0, math.floor(tpm_adm.remaining)))
        out["x-ratelimit-reset-tokens"] = f"{max(0.0, tpm_adm.reset_s):.3f}s"
    return out
