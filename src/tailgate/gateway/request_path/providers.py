"""The providers as this gateway process sees them: each one's live state (client pool, drain / pause flags,
pacer, measured windows, attempts in flight), the set a reload swaps (:class:`Providers`), and the cap on
attempts in flight across them (``server.max_upstream_in_flight``).

Named ``providers`` (it was ``gateway/state.py``, a name that clashed with the ``tailgate.state`` package).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import PacingConfig
from tailgate.routing import Pacer
from tailgate.state import SharedState
from tailgate.stats import SlidingWindow
from tailgate.upstream import CallResult, UpstreamClient, endpoint_for
from tailgate.wire import errors as wire_errors

__all__ = [
    "WINDOW_S",
    "ProviderState",
    "Providers",
    "check_upstream_capacity",
    "pacer_for",
    "provider_state",
    "upstream_full",
]

WINDOW_S = 60.0


def pacer_for(provider: ResolvedProvider, pacing: PacingConfig) -> Pacer:
    """The provider's pacer: buckets at ``headroom`` × its known ``limits.rpm`` / ``tpm`` (none: unlimited)."""
    limits = provider.limits
    if not pacing.enabled:
        return Pacer()
    return Pacer(limits.rpm, limits.tpm, headroom=pacing.headroom, burst_s=pacing.burst, clock=time.monotonic)


@dataclass
class ProviderState:
    """One provider as this gateway sees it right now."""

    config: ResolvedProvider
    client: UpstreamClient
    drained: bool = False
    paused_until: float = 0.0
    """Monotonic time until which a 429's Retry-After keeps new requests away."""
    in_flight: int = 0
    ttft: SlidingWindow = field(default_factory=lambda: SlidingWindow(WINDOW_S, 12))
    e2e: SlidingWindow = field(default_factory=lambda: SlidingWindow(WINDOW_S, 12))
    pacer: Pacer = field(default_factory=Pacer)
    """RPM/TPM buckets from ``limits`` (see :func:`pacer_for`); unlimited by default."""
    paced: int = 0
    """Attempts this provider skipped because its pacer could not admit them now."""
    shared: SharedState | None = None
    """The fleet's state (``state: redis``): pauses are fleet-wide (docs/fleet.md); None alone."""
    on_pause: Callable[[str, float], None] | None = None
    """Tells the fleet about a pause (set by ``gateway.fleet``)."""
    anthropic_client: UpstreamClient | None = None
    """A pool to the provider's native Anthropic endpoint (``anthropic_base_url``): ``/v1/messages`` requests
    routed here pass through to it (gateway/apis/messages.py); None: they are translated to OpenAI chat."""

    async def close(self) -> None:
        """Close the provider's connection pools."""
        await self.client.close()
        if self.anthropic_client is not None:
            await self.anthropic_client.close()

    @property
    def name(self) -> str:
        return self.config.name

    def paused(self, now: float) -> bool:
        if now < self.paused_until or now < self.pacer.paused_until:
            return True
        return self.shared is not None and self.shared.paused_for("provider:" + self.config.name) > 0

    def pause(self, seconds: float, now: float | None = None) -> None:
        """Keep new requests away for ``seconds`` (a 429's Retry-After); a longer pause in force stays.
        In a fleet every replica keeps them away (within one sync)."""
        now = time.monotonic() if now is None else now
        self.paused_until = max(self.paused_until, now + seconds)
        self.pacer.pause_for(seconds)
        if self.on_pause is not None:
            self.on_pause(self.config.name, seconds)

    def fleet_paused_for(self) -> float:
        return self.shared.paused_for("provider:" + self.config.name) if self.shared is not None else 0.0

    def admit_in(self, tokens: float, now: float) -> float:
        """Seconds until this provider could take a request of ``tokens`` (0.0: now)."""
        return max(0.0, self.paused_until - now, self.pacer.available_in(tokens), self.fleet_paused_for())

    def observe(self, result: CallResult, model: str | None = None) -> None:
        """Feed one finished attempt into the live windows (errors by class as counters); ``model``: the route's
        upstream model, for the prompt cache's hit rate per route (provider × model)."""
        self.e2e.incr("attempts")
        if result.ok:
            if result.ttft_ms is not None:
                self.ttft.record(result.ttft_ms)
            if result.e2e_ms is not None:
                self.e2e.record(result.e2e_ms)
        else:
            self.e2e.incr("errors")
            self.e2e.incr(f"error:{result.error_class}")
        if result.status == 429:
            self.e2e.incr("429")
        if result.cached_tokens is not None and result.prompt_tokens:  # the provider says what it cached
            cached = min(result.cached_tokens, result.prompt_tokens)
            self.e2e.incr("cache:prompt", result.prompt_tokens)
            self.e2e.incr("cache:cached", cached)
            if model is not None:
                self.e2e.incr(f"route-cache:prompt:{model}", result.prompt_tokens)
                self.e2e.incr(f"route-cache:cached:{model}", cached)

    def cost(
        self,
        prompt_tokens: int | None,
        output_tokens: int | None,
        cached_tokens: int | None = None,
        *,
        at: float | None = None,
    ) -> float | None:
        """What a live request that arrived at Unix time ``at`` (default now) cost in the price's currency, cached
        prompt tokens at ``price.cached_input``, in the price window it fell in (``PriceConfig.quote``;
        docs/keys.md, "What a request costs"); None when the provider has no price."""
        price = self.config.price
        if not (price.input or price.output):
            return None
        if not price.windows:
            return price.cost(prompt_tokens, output_tokens, cached_tokens)
        return price.quote(prompt_tokens, output_tokens, cached_tokens, at=at).cost

    def price_tier(self, at: float | None = None) -> str | None:
        """The price tier a live request that arrived at ``at`` is priced at (``standard`` or a window's name);
        None when the provider has no price."""
        price = self.config.price
        if not (price.input or price.output):
            return None
        return price.rates(at=at)[3] if price.windows else "standard"

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """What ``GET /admin/providers`` shows (never a key)."""
        now = time.monotonic() if now is None else now
        ttft, e2e = self.ttft.histogram(), self.e2e.histogram()
        attempts = self.e2e.counter("attempts")
        errors = self.e2e.counter("errors")
        state = "drained" if self.drained else ("paused" if self.paused(now) else "active")
        return {
            "name": self.name,
            "preset": self.config.preset,
            "base_url": self.config.base_url,
            "state": state,
            "paused_for_s": round(
                max(0.0, self.paused_until - now, self.pacer.paused_until - now, self.fleet_paused_for()), 3
            ),
            "pacer": self.pacer.snapshot() | {"skipped": self.paced},
            "in_flight": self.in_flight,
            "window_s": WINDOW_S,
            "attempts": attempts,
            "error_rate": round(errors / attempts, 4) if attempts else None,
            "errors": {k.removeprefix("error:"): v for k, v in self.e2e.counters().items() if k.startswith("error:")},
            "ttft_ms": _pcts(ttft) if ttft.count else None,
            "e2e_ms": _pcts(e2e) if e2e.count else None,
            "cache": self.cache_snapshot(),
            "cache_routes": self.cache_routes(),
        }

    def cache_snapshot(self) -> dict[str, Any]:
        """The prompt cache over the window: prompt tokens of the answers whose usage said what was cached, the
        cached ones, and their ratio (None when none said: not reported, never 0 %)."""
        prompt, cached = self.e2e.counter("cache:prompt"), self.e2e.counter("cache:cached")
        return {
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 4) if prompt else None,
        }

    def cache_routes(self) -> dict[str, dict[str, Any]]:
        """The prompt cache over the window per route: upstream model → what :meth:`cache_snapshot` shows for the
        provider, from that route's answers only (a model absent: none of its answers said what was cached)."""
        counters = self.e2e.counters()
        out: dict[str, dict[str, Any]] = {}
        for name, prompt in counters.items():
            if name.startswith("route-cache:prompt:") and prompt:
                model = name.removeprefix("route-cache:prompt:")
                cached = counters.get(f"route-cache:cached:{model}", 0)
                out[model] = {
                    "prompt_tokens": prompt,
                    "cached_tokens": cached,
                    "hit_rate": round(cached / prompt, 4),
                }
        return dict(sorted(out.items()))


def provider_state(resolved: ResolvedProvider, pacing: PacingConfig) -> ProviderState:
    """A provider's fresh state: its own client pool (two with an ``anthropic_base_url``) and pacer."""
    endpoint = endpoint_for(resolved)
    native = None
    if resolved.anthropic_base_url is not None:
        native = UpstreamClient(dataclasses.replace(endpoint, base_url=resolved.anthropic_base_url))
    return ProviderState(
        config=resolved, client=UpstreamClient(endpoint), pacer=pacer_for(resolved, pacing), anthropic_client=native
    )


class Providers(dict[str, ProviderState]):
    """The gateway's providers by name; a provider removed by a reload is still found by the requests that
    were already on it (``retired``), while listings, ``.get`` and new requests see only the current ones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retired: dict[str, ProviderState] = {}

    def __missing__(self, name: str) -> ProviderState:
        return self.retired[name]


def upstream_full(providers: Mapping[str, ProviderState], limit: int | None) -> bool:
    """Are ``limit`` (``server.max_upstream_in_flight``) attempts already out? (A hedge then does not fire.)"""
    return limit is not None and sum(p.in_flight for p in providers.values()) >= limit


def check_upstream_capacity(providers: Mapping[str, ProviderState], limit: int | None) -> None:
    """Refuse an attempt (503 + Retry-After) when ``limit`` (``server.max_upstream_in_flight``) attempts are
    already out: a refusal, never a queue."""
    if limit is None:
        return
    out = sum(p.in_flight for p in providers.values())
    if out >= limit:
        err = wire_errors.overloaded(
            f"The gateway has {out} upstream attempts in flight (server.max_upstream_in_flight = {limit}). "
            "Retry shortly."
        )
        err.headers = {"Retry-After": "1"}
        raise err


def _pcts(hist: Any) -> dict[str, float]:
    return {k: round(float(v), 3) for k, v in hist.summary().items() if k in ("p50", "p90", "p99", "count")}
