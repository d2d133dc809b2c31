"""The route table: everything a request's routing reads, built from the config and swapped whole on reload.

A :class:`RouteTable` holds the aliases and their routes, each alias's policy, hedger and SLO, and the
retry, shedding, pacing and attempt-cap settings. It is never changed after it is built: a reload builds a
new one (keeping the policies and hedgers of aliases whose settings did not change, so their learnt state
stays) and the gateway swaps it in one assignment. A request reads the table once, when it arrives, and uses
that table to its end, so a reload never changes a request already admitted (its retries, fallbacks, hedge
and settings are the ones it started with). The providers' live state (pauses, breakers, in-flight counts)
is not in the table: it is read live, by name (``providers.Providers`` still finds a provider a reload
removed, for the requests already on it).

Policies and hedgers are built here (``make_policy``) over the health windows and breakers the gateway owns
for its lifetime; they are kept across reloads by name and settings, never mutated by one.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from prometheus_client import Counter

from tailgate.config.schema import GatewayConfig, PacingConfig, RetryConfig, ShedConfig
from tailgate.gateway.request_path.hedging import Hedger
from tailgate.gateway.request_path.providers import ProviderState
from tailgate.routing import (
    SLO,
    AdaptivePolicy,
    Affinity,
    AffinitySettings,
    BreakerRegistry,
    CostPolicy,
    HealthRegistry,
    LeastLatencyPolicy,
    Policy,
    Price,
    Route,
    WeightedPolicy,
)
from tailgate.routing.quality import QualityBoard

__all__ = ["RouteTable", "affinity_settings", "build_routes", "make_policy", "slo_for", "unchanged_aliases"]


@dataclass(frozen=True, slots=True, eq=False)
class RouteTable:
    """One config's routing, read by a request once (see the module docstring). Never mutated."""

    aliases: Mapping[str, tuple[Route, ...]]
    """alias → its routes, in the config's order."""
    policies: Mapping[str, Policy]
    hedgers: Mapping[str, Hedger]
    """Only the aliases that hedge (``models.<alias>.hedge`` or ``routing.hedge``)."""
    slos: Mapping[str, SLO]
    policy: str
    """``routing.policy``: the default policy's name (what ``/admin/providers`` shows)."""
    retry: RetryConfig
    shed: ShedConfig
    pacing: PacingConfig
    max_upstream_in_flight: int | None
    """``server.max_upstream_in_flight``: attempts out across providers beyond which one is refused (503)."""
    affinity: Mapping[str, Affinity] = field(default_factory=dict)
    """alias → its conversation affinity (``routing.affinity`` + ``models.<alias>.affinity``); only aliases
    with it enabled (docs/routing.md, promise 7)."""

    def policy_for(self, alias: str) -> Policy:
        """The routing policy of an alias (``models.<alias>.policy`` or ``routing.policy``)."""
        return self.policies[alias]

    def slo_for(self, alias: str) -> SLO:
        return self.slos[alias]

    def targets(self) -> list[tuple[str, str]]:
        """Every (provider, upstream model) some alias routes to, once each, in the config's order."""
        return list(dict.fromkeys((r.provider, r.model) for routes in self.aliases.values() for r in routes))

    def degraded(self, provider: str, model: str) -> bool:
        """Does an adaptive alias hold the route ``provider``/``model`` below half its weight (probe it often)?"""
        for alias, routes in self.aliases.items():
            policy = self.policies[alias]
            if isinstance(policy, AdaptivePolicy):
                for r in routes:
                    if r.provider == provider and r.model == model and r.weight > 0 and policy.factor(r) < 0.5:
                        return True
        return False


def slo_for(config: GatewayConfig, alias: str) -> SLO:
    """The alias's SLO: ``models.<alias>.slo`` field by field, else ``routing.slo``, else 1 s / 3 s."""
    own = config.models[alias].slo
    base, default = config.routing.slo, SLO()
    ttft = (own.ttft_p90 if own is not None else None) or base.ttft_p90 or default.ttft_p90
    e2e = (own.e2e_p90 if own is not None else None) or base.e2e_p90 or default.e2e_p90
    return SLO(ttft_p90=ttft, e2e_p90=e2e)


def affinity_settings(config: GatewayConfig, alias: str, providers: Mapping[str, ProviderState]) -> AffinitySettings:
    """The alias's affinity: ``routing.affinity`` with ``models.<alias>.affinity``'s given fields on top; its cache
    minimum is the smallest ``cache_min_tokens`` among the alias's providers (a cache that can pay somewhere)."""
    merged = config.routing.affinity.model_dump()
    own = config.models[alias].affinity
    if own is not None:
        merged.update(own.model_dump(exclude_none=True))
    routes = config.models[alias].routes
    mins = [providers[r.provider].config.cache_min_tokens for r in routes if r.provider in providers]
    return AffinitySettings(
        enabled=merged["enabled"],
        sources=tuple(merged["sources"]),
        prefix_chars=merged["prefix_chars"],
        epsilon=merged["epsilon"],
        window=merged["window"],
        min_tokens=float(min(mins, default=64)),
    )


def make_policy(
    name: str,
    slo: SLO,
    config: GatewayConfig,
    providers: Mapping[str, ProviderState],
    *,
    health: HealthRegistry,
    breakers: BreakerRegistry,
    quality: QualityBoard | None = None,
) -> Policy:
    """A new policy called ``name`` for an alias with ``slo`` (``routing.adaptive`` settings, prices)."""
    if name == "adaptive":
        ac = config.routing.adaptive
        return AdaptivePolicy(
            health,
            breakers=breakers,
            slo=slo,
            exponent=ac.exponent,
            error_rate_zero=ac.error_rate_zero,
            min_samples=ac.min_samples,
            floor=ac.floor,
            recompute_s=ac.recompute,
            smoothing_down_tau_s=ac.smoothing_down,
            far_ratio=ac.far_ratio,
            fast_window_s=ac.fast_window,
            fast_min_misses=ac.fast_min_misses,
            readmit_after=ac.readmit_after,
            slow_start_s=ac.slow_start,
            prior_idle_s=config.routing.window,
            quality=quality,  # promise 8: one board per gateway (answer_quality.py)
            clock=time.monotonic,
        )
    if name == "least-latency":
        return LeastLatencyPolicy(health, breakers=breakers)
    if name == "cost":
        prices = {n: Price(p.config.price.input, p.config.price.output) for n, p in providers.items()}
        return CostPolicy(health, prices, breakers=breakers, slo=slo)
    return WeightedPolicy()


def build_routes(
    config: GatewayConfig,
    providers: Mapping[str, ProviderState],
    *,
    health: HealthRegistry,
    breakers: BreakerRegistry,
    hedges: Counter,
    previous: RouteTable | None = None,
    kept: Collection[str] = (),
    quality: QualityBoard | None = None,
) -> RouteTable:
    """The route table of ``config``. Aliases in ``kept`` (unchanged since ``previous``) keep ``previous``'s
    policy and hedger objects, with what they learnt; every other alias gets new ones."""
    policies: dict[str, Policy] = {}
    hedgers: dict[str, Hedger] = {}
    slos: dict[str, SLO] = {}
    affinity: dict[str, Affinity] = {}
    for alias, model in config.models.items():
        slos[alias] = slo = slo_for(config, alias)
        settings = affinity_settings(config, alias, providers)
        if settings.enabled:
            old = previous.affinity.get(alias) if previous is not None else None
            affinity[alias] = old if old is not None and old.settings == settings else Affinity(settings)
        keep = previous is not None and alias in kept
        if keep and previous is not None and alias in previous.policies:
            policies[alias] = previous.policies[alias]
        else:
            policies[alias] = make_policy(
                model.policy or config.routing.policy,
                slo,
                config,
                providers,
                health=health,
                breakers=breakers,
                quality=quality,
            )
        if (hedge := model.hedge or config.routing.hedge) is not None:
            if keep and previous is not None and alias in previous.hedgers:
                hedgers[alias] = previous.hedgers[alias]
            else:
                hedgers[alias] = Hedger(alias, hedge, hedges)
    aliases = {
        alias: tuple(Route(alias, r.provider, r.model, r.weight, frozenset(r.classes)) for r in model.routes)
        for alias, model in config.models.items()
    }
    return RouteTable(
        aliases=aliases,
        policies=policies,
        hedgers=hedgers,
        slos=slos,
        policy=config.routing.policy,
        retry=config.retry,
        shed=config.routing.shed,
        pacing=config.routing.pacing,
        max_upstream_in_flight=config.server.max_upstream_in_flight,
        affinity=affinity,
    )


def unchanged_aliases(old: GatewayConfig, new: GatewayConfig) -> set[str]:
    """Aliases whose policy and hedger a reload from ``old`` to ``new`` keeps (their settings are the same)."""
    if old.routing != new.routing:
        return set()
    return {a for a, m in new.models.items() if old.models.get(a) == m}
