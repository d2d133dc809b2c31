"""``tailgate config check FILE``: validate a gateway config and show the routing it resolves to.

The report is what the gateway would run with: per alias its routes and traffic shares, per provider the
merged URL, masked keys, timeouts, limits, price and the preset's notes on rate-limit headers and 429s,
then warnings about settings this version does not act on or that ``serve`` would refuse. No key is ever
printed in full; the text and ``--json`` forms are built from masked values only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailgate.config.presets import PRESETS
from tailgate.config.resolve import ResolvedProvider, display_url, load_resolved, mask_key
from tailgate.config.schema import GatewayConfig, PriceConfig


@dataclass(frozen=True)
class StoreInfo:
    """The config's store as the command line found it (``tailgate.ledger`` reads it; this layer only prints)."""

    where: str
    """Absolute path, or URL without its password; "" with the ledger off."""
    keys: int | None
    """Runtime keys in it (revoked ones included); None: could not be read."""
    note: str = ""


@dataclass(frozen=True)
class CheckReport:
    """A loaded config, its resolved providers and what deserves a warning."""

    source: str
    config: GatewayConfig
    providers: dict[str, ResolvedProvider]
    warnings: tuple[str, ...]
    store: StoreInfo | None = None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses; wildcard and other addresses are not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def find_warnings(cfg: GatewayConfig, providers: Mapping[str, ResolvedProvider]) -> list[str]:
    """Settings that load but do not do what they say, or that ``serve`` would refuse."""
    out: list[str] = []
    if not cfg.keys and not cfg.allow_open and not is_loopback(cfg.listen.host):
        out.append(
            f"listen.host: {cfg.listen.host} is not a loopback address and no gateway keys are configured: "
            "serve refuses to bind it (add keys, bind 127.0.0.1, or set allow_open: true)"
        )
    elif not cfg.keys and cfg.allow_open and not is_loopback(cfg.listen.host):
        out.append(f"allow_open: the gateway accepts any client on {cfg.listen.host} without a key")
    used = {route.provider for model in cfg.models.values() for route in model.routes}
    for name, rp in providers.items():
        preset = PRESETS.get(rp.preset) if rp.preset is not None else None
        if not rp.api_keys and preset is not None and preset.requires_key:
            out.append(
                f"providers.{name}.api_keys: none given, but preset {preset.name} needs a key "
                "(every request would be refused upstream)"
            )
        if name not in used:
            out.append(f"providers.{name}: no route uses this provider")
        if len(set(rp.api_keys)) != len(rp.api_keys):
            out.append(f"providers.{name}.api_keys: the same key is listed twice")
    for alias, model in cfg.models.items():
        for i, route in enumerate(model.routes):
            if route.weight == 0:
                out.append(f"models.{alias}.routes[{i}].weight: 0, so this route is never chosen by weight")
    out += _example_secrets(cfg, providers)
    return out


# Values copied from an example or a tutorial: whoever read the same page knows them.
_PLACEHOLDER_STARTS = ("change-me", "change_me", "changeme", "replace-me", "replace_me", "replaceme", "your-",
                       "your_", "yourkey", "your key", "<", "insert", "put-your", "todo")  # fmt: skip
_PLACEHOLDER_WORDS = frozenset({"secret", "password", "admin", "test", "key", "apikey", "api-key", "token", "sk"})


def placeholder(value: str) -> str | None:
    """The example-like part of ``value`` (``change-me…``, ``sk-xxx…``, ``your-…``), or None for a real-looking key."""
    v = value.strip().lower()
    bare = v.removeprefix("sk-")
    for start in _PLACEHOLDER_STARTS:
        if v.startswith(start) or bare.startswith(start):
            return start + "…"
    if "xxx" in v:
        return "xxx"
    if v.endswith(("...", "…")):
        return "…"
    if v in _PLACEHOLDER_WORDS or bare in _PLACEHOLDER_WORDS:
        return v
    return None


def _example_secrets(cfg: GatewayConfig, providers: Mapping[str, ResolvedProvider]) -> list[str]:
    """A warning per secret that is a known placeholder: the admin or dashboard key, a gateway key, an api key."""
    found: list[tuple[str, str]] = []
    for path, secret in (
        ("admin_key", cfg.admin_key),
        ("dashboard_key", cfg.dashboard_key),
        ("metrics.key", cfg.metrics.key),
    ):
        if secret is not None:
            found.append((path, secret.get_secret_value()))
    found += [(f"keys[{i}].key", k.key.get_secret_value()) for i, k in enumerate(cfg.keys) if k.key is not None]
    found += [
        (f"providers.{name}.api_keys[{i}]", key) for name, rp in providers.items() for i, key in enumerate(rp.api_keys)
    ]
    out = []
    for path, value in found:
        like = placeholder(value)
        if like is not None:
            out.append(
                f"{path}: an example value ({like!r}), not a secret: anyone who read the example knows it "
                "(set your own, e.g. through an environment variable)"
            )
    return out


def check_file(
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    store: Callable[[GatewayConfig], StoreInfo | None] | None = None,
) -> CheckReport:
    """Load and resolve ``path`` (raises :class:`ConfigError` with located problems) and collect warnings;
    ``store`` looks at the config's store (the command line passes the ledger's reader)."""
    cfg, providers = load_resolved(path, env=env)
    info = store(cfg) if store is not None else None
    warnings = find_warnings(cfg, providers)
    return CheckReport(str(path), cfg, providers, tuple(warnings), info)


def state_text(cfg: GatewayConfig) -> str:
    """``local (this process)`` or ``redis at redis://:***@host:6379/0`` (never the password)."""
    if cfg.state.backend == "redis" and cfg.state.url is not None:
        return f"redis at {display_url(cfg.state.url.get_secret_value())}"
    return "local (this process only)"


def _keys_text(cfg: GatewayConfig, info: StoreInfo | None) -> str:
    in_config = ", ".join(k.id for k in cfg.keys)
    stored = info.keys if info is not None else None
    if stored:
        return f"{in_config} + {stored} in the store" if in_config else f"{stored} in the store (the gateway is closed)"
    if in_config:
        return in_config
    if info is not None and stored is None:
        return "none in the config; the store's could not be read"
    return "none (open: any bearer is accepted, loopback only)"


def _store_text(info: StoreInfo | None) -> str:
    if info is None or not info.where:
        return "off (ledger.enabled: false)" if info is not None else "-"
    count = f"{info.keys} key{'' if info.keys == 1 else 's'}" if info.keys is not None else "keys unknown"
    return f"{info.where} ({count}{'; ' + info.note if info.note else ''})"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:g}"


def _secs(x: float | None) -> str:
    return "off" if x is None else f"{x:g}s"


def _price(p: PriceConfig) -> str:
    """A provider's price; without one (input and output 0) it has no cost: its ledger rows record NULL."""
    if not (p.input or p.output):
        return "no price (its requests are recorded without a cost)"
    cached = f" ({_num(p.cached_input)} cached)" if p.cached_input is not None else ""
    out = f"{_num(p.input)} in{cached} / {_num(p.output)} out {p.currency} per 1M tokens"
    if p.batch is not None:
        b_in, b_out, b_cached, _ = p.rates(lane="provider-batch")
        out += f"; batch {_num(b_in)} in ({_num(b_cached)} cached) / {_num(b_out)} out"
    for w in p.windows:
        how = f"×{w.ratio:g}" if w.ratio is not None else "own prices"
        out += f"; {w.tier}: {w.start}-{w.end} {w.timezone} {how}"
    return out


def _shares(weights: list[float]) -> list[float]:
    total = sum(weights)
    return [100.0 * w / total if total > 0 else 0.0 for w in weights]


def to_json(report: CheckReport) -> dict[str, Any]:
    """The report as JSON-ready data; keys appear masked only."""
    cfg = report.config
    models: dict[str, Any] = {}
    for alias, model in cfg.models.items():
        shares = _shares([r.weight for r in model.routes])
        models[alias] = {
            "policy": model.policy or cfg.routing.policy,
            "routes": [
                {
                    "provider": r.provider,
                    "preset": report.providers[r.provider].preset,
                    "base_url": display_url(report.providers[r.provider].base_url),
                    "model": r.model,
                    "weight": r.weight,
                    "share_pct": round(share, 2),
                    "classes": list(r.classes),
                }
                for r, share in zip(model.routes, shares, strict=True)
            ],
        }
    providers: dict[str, Any] = {}
    for name, rp in report.providers.items():
        preset = PRESETS.get(rp.preset) if rp.preset is not None else None
        providers[name] = {
            "preset": rp.preset,
            "base_url": display_url(rp.base_url),
            "api_keys": [mask_key(k) for k in rp.api_keys],
            "timeouts": rp.timeouts.model_dump(),
            "limits": rp.limits.model_dump(),
            "price": rp.price.model_dump(),
            "max_output_tokens": rp.max_output_tokens,
            "headers": sorted(rp.headers),
            "rate_limit_headers": preset.rate_limit_headers if preset else None,
            "status_429": preset.status_429 if preset else None,
            "notes": preset.notes if preset else None,
        }
    info = report.store
    return {
        "ok": True,
        "source": report.source,
        "listen": {"host": cfg.listen.host, "port": cfg.listen.port},
        "gateway_keys": [k.id for k in cfg.keys],
        "state": {
            "backend": cfg.state.backend,
            "url": display_url(cfg.state.url.get_secret_value()) if cfg.state.url is not None else None,
        },
        "store": (
            {"where": info.where or None, "keys": info.keys, "note": info.note or None} if info is not None else None
        ),
        "allow_open": cfg.allow_open,
        "routing": {
            "policy": cfg.routing.policy,
            "effective_policy": cfg.routing.policy,
            "policies": {alias: model.policy or cfg.routing.policy for alias, model in cfg.models.items()},
        },
        "models": models,
        "providers": providers,
        "warnings": list(report.warnings),
    }


def _table(rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def to_text(report: CheckReport) -> str:
    """A plain-text report (no wrapping, so paths and URLs stay whole when piped)."""
    cfg = report.config
    allow_open = "true" if cfg.allow_open else "false"
    lines = [
        f"{report.source}: ok",
        f"listen {cfg.listen.host}:{cfg.listen.port}   gateway keys: {_keys_text(cfg, report.store)}   "
        f"allow_open: {allow_open}",
        f"state: {state_text(cfg)}",
        f"store: {_store_text(report.store)}",
        f"routing.policy: {cfg.routing.policy}   retry: {cfg.retry.max_attempts} attempts "
        f"within {_secs(cfg.retry.deadline)}",
        "",
        "models",
    ]
    for alias, model in cfg.models.items():
        lines.append(f"  {alias}" + (f"   (policy: {model.policy})" if model.policy else ""))
        rows = [["route", "provider", "preset", "base_url", "upstream model", "weight", "share", "classes"]]
        shares = _shares([r.weight for r in model.routes])
        for i, (r, share) in enumerate(zip(model.routes, shares, strict=True)):
            rp = report.providers[r.provider]
            rows.append(
                [
                    str(i),
                    r.provider,
                    rp.preset or "-",
                    display_url(rp.base_url),
                    r.model,
                    _num(r.weight),
                    f"{share:.1f}%",
                    ", ".join(r.classes) or "all",
                ]
            )
        lines += _table(rows, "    ")
    lines += ["", "providers"]
    for name, rp in report.providers.items():
        preset = PRESETS.get(rp.preset) if rp.preset is not None else None
        t, lim, p = rp.timeouts, rp.limits, rp.price
        lines.append(f"  {name}" + (f" (preset {preset.name}: {preset.title})" if preset else " (no preset)"))
        rows = [
            ["base_url", display_url(rp.base_url)],
            ["api_keys", ", ".join(mask_key(k) for k in rp.api_keys) or "none"],
            [
                "timeouts",
                f"connect {_secs(t.connect)}, headers {_secs(t.headers)}, first_token {_secs(t.first_token)}, "
                f"idle {_secs(t.idle)}, total {_secs(t.total)}",
            ],
            ["limits", f"rpm {_num(lim.rpm)}, tpm {_num(lim.tpm)}, max_connections {lim.max_connections}"],
            ["price", _price(p)],
            ["max_output", _num(rp.max_output_tokens)],
        ]
        if rp.headers:
            rows.append(["headers", ", ".join(sorted(rp.headers)) + " (values hidden)"])
        if preset is not None:
            rows += [["rate-limit headers", preset.rate_limit_headers], ["429", preset.status_429]]
            if preset.notes:
                rows.append(["notes", preset.notes])
        lines += _table(rows, "    ")
    lines += ["", f"warnings ({len(report.warnings)})"]
    lines += [f"  - {w}" for w in report.warnings] or ["  none"]
    return "\n".join(lines)
