"""Turn a validated :class:`GatewayConfig` into one plain, frozen record per provider.

A provider entry in the YAML may lean on a preset (``preset: lanyun``) for its URL and known limits; this
module merges the two (the user's fields win), checks what pydantic cannot (URLs, empty keys, header
syntax) and hands the gateway :class:`ResolvedProvider` values that hold raw keys but never print them.
Every problem is located the way the loader locates its own: ``file:line: path: message``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tailgate.config.loader import ConfigError, did_you_mean, format_path, interpolate, parse_yaml, validate_data
from tailgate.config.presets import ALIASES, PRESETS, ProviderPreset, get_preset, known_presets
from tailgate.config.schema import GatewayConfig, LimitsConfig, PriceConfig, ProviderConfig, TimeoutsConfig

Loc = tuple[int | str, ...]
Lines = dict[Loc, int]

# RFC 9110 §5.6.2: a field name is a token.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Field names whose values are secrets wherever they appear in a gateway config (used to scrub errors).
# ``url`` is ledger.url and state.url: one may be a password without the URL around it (a pasted DSN).
_SECRET_FIELDS = frozenset({"api_keys", "key", "key_sha256", "admin_key", "dashboard_key", "headers", "url"})
# The userinfo of a URL with a password (``scheme://user:password@``), wherever it appears in a message: the
# password runs to the last ``@`` before a space or quote, so a password holding ``@`` is hidden whole.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)[^\s'\"]*@")


@dataclass(frozen=True)
class ResolvedProvider:
    """One upstream provider, preset merged in. Holds raw keys: never log it except through ``repr``."""

    name: str
    preset: str | None
    base_url: str
    api_keys: tuple[str, ...]
    timeouts: TimeoutsConfig
    limits: LimitsConfig
    price: PriceConfig
    max_output_tokens: int | None
    headers: Mapping[str, str]
    """Extra request headers (a private copy; treat as read-only). Values may be secrets."""
    anthropic_base_url: str | None = None
    """The provider's Anthropic Messages API root (user's, else the preset's); None: OpenAI chat only."""
    thinking_switch: str = "thinking"
    """How its chat API switches reasoning, for translated ``/v1/messages`` requests (user's, else the preset's)."""
    top_k: bool = False
    """Its chat API takes ``top_k`` (the preset's ``top_k``): a translated ``/v1/messages`` request keeps the
    client's ``top_k`` only then (gateway/apis/messages.py)."""
    cache_min_tokens: int = 64
    """The shortest prompt its prompt cache serves: the user's, else the preset's, else 64 (DeepSeek's unit)."""
    drop_fields: frozenset[str] = frozenset()
    """Top-level request fields left out of what goes to it (the user's ``drop_fields``, else the preset's)."""
    flex: bool = False
    """It takes ``service_tier: "flex"`` (``providers.NAME.flex``, else the preset's): otherwise that field is left
    out of what goes to it (gateway/apis/openai_family.py)."""
    batch_api: bool = False
    """It serves OpenAI's Batch API (``providers.NAME.batch_api``): the batch executor may send it jobs."""
    propagate_trace: bool = False
    """Attempts to it carry a W3C ``traceparent`` (``providers.NAME.propagate_trace``; with telemetry on)."""

    def __repr__(self) -> str:
        keys = ", ".join(mask_key(k) for k in self.api_keys)
        return (
            f"ResolvedProvider(name={self.name!r}, preset={self.preset!r}, base_url={display_url(self.base_url)!r}, "
            f"api_keys=[{keys}], timeouts={self.timeouts!r}, limits={self.limits!r}, price={self.price!r}, "
            f"max_output_tokens={self.max_output_tokens!r}, headers={sorted(self.headers)!r}, "
            f"anthropic_base_url={display_url(self.anthropic_base_url) if self.anthropic_base_url else None!r})"
        )


def mask_key(key: str) -> str:
    """``sk-…abcd``: a short known prefix and at most the last 4 characters; ``***`` for keys under 12."""
    if len(key) < 12:
        return "***"
    dash = key.find("-")
    prefix = key[: dash + 1] if 0 < dash <= 4 else ""
    return f"{prefix}…{key[-4:]}"


def hash_key(key: str) -> str:
    """The sha256 hex digest of a gateway key, as stored in ``keys[].key_sha256``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def scrub_urls(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (messages, logs, errors)."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def url_password(url: str) -> str | None:
    """The password of a ``scheme://user:password@host`` URL, or None."""
    try:
        parts = urlsplit(url) if "://" in url else None
    except ValueError:  # e.g. an unbalanced "[" in the host
        return None
    if parts is None or "@" not in parts.netloc:
        return None
    userinfo = parts.netloc.rsplit("@", 1)[0]
    return userinfo.split(":", 1)[1] if ":" in userinfo else None


def display_url(url: str) -> str:
    """A URL safe to print: a password in it becomes ``***`` and a query string ``?…``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    return f"{parts.scheme}://{netloc}{parts.path}" + ("?…" if parts.query else "")


def _check_base_url(url: str) -> str | None:
    """Why ``url`` cannot be a base URL, or None if it can."""
    if any(c.isspace() for c in url):
        return "must not contain spaces"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"  # the value is not echoed: it may be a pasted key
    if parts.fragment:
        return "must not contain a '#fragment'"
    if parts.path.rstrip("/").endswith(("/chat/completions", "/completions", "/embeddings")):
        # Clients append the endpoint themselves; Qiniu's FAQ lists this as the usual mistake.
        return "is the API root the OpenAI SDK takes (e.g. https://api.example.com/v1), not an endpoint URL"
    return None


def _check_anthropic_url(url: str) -> str | None:
    """Why ``url`` cannot be an Anthropic API root, or None if it can."""
    if url.endswith(("/v1/messages", "/messages")):
        return "is the API root the Anthropic SDK takes (e.g. https://api.deepseek.com/anthropic), not an endpoint URL"
    return _check_base_url(url)


def _merge_limits(preset: ProviderPreset | None, user: LimitsConfig | None, n_keys: int) -> LimitsConfig:
    base: dict[str, Any] = {}
    if preset is not None:
        scale = max(1, n_keys) if preset.limits_scope == "key" else 1
        base = {k: v * scale for k, v in (("rpm", preset.rpm), ("tpm", preset.tpm)) if v is not None}
    if user is not None:  # only what the user wrote wins; an explicit null clears a preset value
        base.update(user.model_dump(exclude_unset=True))
    return LimitsConfig(**base)


def _merge_price(preset: ProviderPreset | None, user: PriceConfig | None) -> PriceConfig:
    base: dict[str, Any] = {"currency": preset.currency} if preset is not None else {}
    if user is not None:
        base.update(user.model_dump(exclude_unset=True))
    ratio = preset.cached_input_ratio if preset is not None else None
    if ratio is not None and base.get("cached_input") is None and base.get("input"):
        # The provider publishes what a cache hit costs as a share of input (docs/config.md, presets).
        base["cached_input"] = base["input"] * ratio
    batch_ratio = preset.batch_price_ratio if preset is not None else None
    batch = base.get("batch")
    if batch is None and batch_ratio is not None and (base.get("input") or base.get("output")):
        batch = base["batch"] = {}  # the provider sells batch at a published share of its price
    if batch is not None:
        if batch.get("ratio") is None and batch_ratio is not None:
            batch["ratio"] = batch_ratio
        cached_share = preset.batch_cached_input_ratio if preset is not None else None
        if batch.get("cached_input") is None and cached_share is not None:
            b_in = (
                batch["input"] if batch.get("input") is not None else base.get("input", 0.0) * batch.get("ratio", 1.0)
            )
            batch["cached_input"] = b_in * cached_share
    return PriceConfig(**base)


def _price_problems(loc: Loc, preset: ProviderPreset | None, price: PriceConfig | None) -> list[tuple[Loc, str]]:
    """``price.batch`` without a way to know the batch input or output price: neither given, nor a ratio (the
    user's or the preset's)."""
    if price is None or price.batch is None:
        return []
    b = price.batch
    if b.ratio is not None or (preset is not None and preset.batch_price_ratio is not None):
        return []
    missing = [f for f in ("input", "output") if getattr(b, f) is None]
    if not missing:
        return []
    return [
        (
            (*loc, "price", "batch"),
            f"price.batch has no {' or '.join(missing)}: give input and output (per million tokens), or ratio, the "
            "share of the interactive price the provider bills in batch (e.g. 0.5)",
        )
    ]


def _resolve_one(name: str, pc: ProviderConfig) -> tuple[ResolvedProvider | None, list[tuple[Loc, str]]]:
    loc: Loc = ("providers", name)
    problems: list[tuple[Loc, str]] = []
    preset: ProviderPreset | None = None
    if pc.preset is not None:
        preset = get_preset(pc.preset)
        if preset is None:
            problems.append(((*loc, "preset"), unknown_preset(pc.preset)))
    base_url = pc.base_url if pc.base_url is not None else (preset.base_url if preset is not None else None)
    if base_url is None:
        if preset is not None:
            why = f"preset {preset.name} is a self-hosted server: give its URL, e.g. http://127.0.0.1:8000/v1"
            problems.append(((*loc, "base_url"), f"required: {why}"))
        elif pc.preset is None:
            why = f"give base_url (e.g. http://127.0.0.1:8000/v1 for vLLM) or a preset ({known_presets()})"
            problems.append(((*loc, "base_url"), f"required: {why}"))
        # else: the unknown preset is the problem already reported
    else:
        base_url = base_url.strip().rstrip("/")
        bad = _check_base_url(base_url)
        if bad is not None:
            problems.append(((*loc, "base_url"), f"base_url {bad}"))
    anthropic_url = (
        pc.anthropic_base_url
        if pc.anthropic_base_url is not None
        else (preset.anthropic_base_url if preset is not None else None)
    )
    if anthropic_url is not None:
        anthropic_url = anthropic_url.strip().rstrip("/")
        if (bad := _check_anthropic_url(anthropic_url)) is not None:
            problems.append(((*loc, "anthropic_base_url"), f"anthropic_base_url {bad}"))
    problems += _price_problems(loc, preset, pc.price)
    keys = tuple(k.get_secret_value() for k in pc.api_keys)
    for i, key in enumerate(keys):
        if not key.strip():
            problems.append(((*loc, "api_keys", i), "empty key (is its environment variable set but empty?)"))
        elif any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in key):
            problems.append(((*loc, "api_keys", i), "key contains whitespace or control characters"))
        elif not key.isascii():
            # It goes into an Authorization header, which the upstream client writes as Latin-1: a key with, say, a
            # pasted "…" would fail every request at send time. Refused here, at load, naming where.
            problems.append(((*loc, "api_keys", i), "key contains a character outside ASCII (pasted from a page?)"))
    for header, value in pc.headers.items():
        if not _HEADER_NAME.match(header):
            problems.append(((*loc, "headers", header), "not a valid HTTP header name"))
        if any(c in value for c in "\r\n\0"):
            problems.append(((*loc, "headers", header), "header value contains a line break or NUL"))
        elif not all(c == "\t" or 0x20 <= ord(c) < 0x7F for c in value):
            # RFC 9110 §5.5: a field value is visible ASCII, space and tab (obs-text aside); anything else fails
            # every request to this provider at send time, so it is refused at load.
            problems.append(((*loc, "headers", header), "header value has a character outside printable ASCII"))
    if problems or base_url is None:
        return None, problems
    return (
        ResolvedProvider(
            name=name,
            preset=preset.name if preset is not None else None,
            base_url=base_url,
            api_keys=keys,
            timeouts=pc.timeouts if pc.timeouts is not None else TimeoutsConfig(),
            limits=_merge_limits(preset, pc.limits, len(keys)),
            price=_merge_price(preset, pc.price),
            max_output_tokens=(
                pc.max_output_tokens
                if pc.max_output_tokens is not None
                else (preset.max_output_tokens if preset is not None else None)
            ),
            headers=dict(pc.headers),
            anthropic_base_url=anthropic_url,
            thinking_switch=pc.thinking_switch or (preset.thinking_switch if preset is not None else "thinking"),
            top_k=preset.top_k if preset is not None else False,
            drop_fields=frozenset(
                pc.drop_fields if pc.drop_fields is not None else (preset.drop_fields if preset is not None else ())
            ),
            cache_min_tokens=(
                pc.cache_min_tokens
                if pc.cache_min_tokens is not None
                else (preset.cache_min_tokens if preset is not None and preset.cache_min_tokens is not None else 64)
            ),
            flex=pc.flex if pc.flex is not None else (preset.flex if preset is not None else False),
            batch_api=pc.batch_api,
            propagate_trace=pc.propagate_trace,
        ),
        [],
    )


def _resolve(cfg: GatewayConfig) -> tuple[dict[str, ResolvedProvider], list[tuple[Loc, str]]]:
    out: dict[str, ResolvedProvider] = {}
    problems: list[tuple[Loc, str]] = []
    for name, pc in cfg.providers.items():
        resolved, found = _resolve_one(name, pc)
        problems += found
        if resolved is not None:
            out[name] = resolved
    return out, problems


def _where(source: str, lines: Lines, loc: Loc) -> str:
    probe = loc
    while probe and probe not in lines:
        probe = probe[:-1]
    line = lines.get(probe)
    return f"{source}:{line}" if line is not None else source


def _located(source: str, lines: Lines, problems: list[tuple[Loc, str]]) -> list[str]:
    return [f"{_where(source, lines, loc)}: {format_path(loc)}: {msg}" for loc, msg in problems]


def resolve_providers(cfg: GatewayConfig, source: str = "config") -> dict[str, ResolvedProvider]:
    """Merge presets into every provider; raise :class:`ConfigError` listing every problem at once."""
    resolved, problems = _resolve(cfg)
    if problems:
        raise ConfigError(source, _located(source, {}, problems))
    return resolved


def _secrets(value: Any, env: Mapping[str, str], inside: bool = False) -> set[str]:
    """Every string under a secret-bearing field, raw and interpolated, to scrub from error messages."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            found |= _secrets(v, env, inside or k in _SECRET_FIELDS)
    elif isinstance(value, list):
        for v in value:
            found |= _secrets(v, env, inside)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        text = str(value)
        values = {text}
        with contextlib.suppress(ConfigError):  # a missing variable is reported on its own
            values.add(str(interpolate(text, env)))
        if inside:
            found |= values
        # A password inside any URL (ledger.url, state.url, a base_url): hidden wherever else it shows up.
        found |= {pw for v in values if (pw := url_password(v))}
    return found


def redact(problems: list[str], secrets: set[str]) -> list[str]:
    """Replace every URL's password with ``***`` and every secret (quoted as pydantic quotes it, or bare if
    long enough) with its mask."""
    out = []
    for line in problems:
        line = scrub_urls(line)
        for secret in sorted(secrets, key=len, reverse=True):
            if not secret:
                continue
            line = line.replace(repr(secret), repr(mask_key(secret)))
            if len(secret) >= 8:
                line = line.replace(secret, mask_key(secret))
        out.append(line)
    return out


def _missing_env(value: Any, env: Mapping[str, str], loc: Loc = ()) -> list[tuple[Loc, str]]:
    """Every ``${VAR}`` that cannot be filled, with its config path (the loader stops at the first)."""
    if isinstance(value, str):
        try:
            interpolate(value, env)
        except ConfigError as exc:
            return [(loc, p.split(": ", 1)[1] if ": " in p else p) for p in exc.problems]
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _missing_env(v, env, (*loc, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _missing_env(v, env, (*loc, i))]
    return []


def load_resolved(
    path: str | Path, *, env: Mapping[str, str] | None = None
) -> tuple[GatewayConfig, dict[str, ResolvedProvider]]:
    """Load, validate and resolve a gateway config file; every problem is ``file:line: path: message``.

    Secrets from the file never appear in the messages: a key that lands in an error is masked.
    """
    source = str(path)
    env = os.environ if env is None else env
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"{source}: cannot read config file: {exc.strerror}"]) from None
    data, lines = parse_yaml(text, source)
    secrets = _secrets(data, env)
    # Every problem in one run (a user fixing five typos should not need three): unset variables, then the
    # fields (validated with a stand-in for each unset variable), then what the fields name.
    missing = _missing_env(data, env)
    unset = {name: "unset" for name in _env_names(data) if name not in env}
    found = _located(source, lines, missing)
    try:
        cfg = validate_data(data, GatewayConfig, source, lines=lines, env={**env, **unset})
    except ConfigError as exc:
        stood_in = {f"{format_path(loc)}:" for loc, _ in missing}
        found += [p for p in redact(exc.problems, secrets) if not any(f" {s}" in p for s in stood_in)]
        said = {p.split(": ", 2)[1] for p in found if p.count(": ") >= 2}  # the paths reported already
        found += _located(
            source, lines, [(loc, m) for loc, m in _cross_references(data) if format_path(loc) not in said]
        )
        if any(": unknown field (" in p for p in found):
            from tailgate import __version__

            # A config written for a newer tailgate fails like a typo: say which version reads it.
            found.append(
                f"{source}: this is tailgate {__version__}: a field documented for a newer version is unknown here "
                "too (upgrade, or remove it)"
            )
        raise ConfigError(source, found) from None
    resolved, problems = _resolve(cfg)
    found += redact(_located(source, lines, problems), secrets)
    if found:
        raise ConfigError(source, found)
    return anchor_paths(cfg, Path(path).parent), resolved


def _env_names(value: Any) -> set[str]:
    """Every ``${VAR}`` name referenced without a default in the raw document."""
    if isinstance(value, str):
        return set(re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", value))
    if isinstance(value, dict):
        return {n for v in value.values() for n in _env_names(v)}
    if isinstance(value, list):
        return {n for v in value for n in _env_names(v)}
    return set()


def _cross_references(data: Any) -> list[tuple[Loc, str]]:
    """When the fields failed (the schema's cross-checks did not run): what the raw document names that does
    not exist — a route's provider, a provider's preset — so they come in the same run as the typos."""
    if not isinstance(data, dict):
        return []
    raw_providers, raw_models = data.get("providers"), data.get("models")
    providers: dict[str, Any] = raw_providers if isinstance(raw_providers, dict) else {}
    models: dict[str, Any] = raw_models if isinstance(raw_models, dict) else {}
    out: list[tuple[Loc, str]] = []
    for alias, model in models.items():
        routes = model.get("routes") if isinstance(model, dict) else None
        for i, route in enumerate(routes if isinstance(routes, list) else []):
            name = route.get("provider") if isinstance(route, dict) else None
            if isinstance(name, str) and name not in providers:
                out.append((("models", alias, "routes", i, "provider"), unknown_provider(name, providers)))
    for name, pc in providers.items():
        preset = pc.get("preset") if isinstance(pc, dict) else None
        if isinstance(preset, str) and get_preset(preset) is None:
            out.append((("providers", name, "preset"), unknown_preset(preset)))
    return out


def unknown_provider(name: str, providers: Mapping[str, Any]) -> str:
    """A route's unknown provider, the known ones and the closest."""
    guess = did_you_mean(name, providers)
    known = ", ".join(sorted(providers)) + (f"; {guess}" if guess else "")
    return f"no provider of this name under 'providers' (known: {known}) (got {name!r})"


def unknown_preset(name: str) -> str:
    guess = did_you_mean(name.strip().lower(), [*PRESETS, *ALIASES])
    return f"unknown preset {name!r} ({guess + ' ' if guess else ''}known: {known_presets()})"


def anchor_paths(cfg: GatewayConfig, base: Path) -> GatewayConfig:
    """``ledger.path`` and ``trace.path`` made absolute: ``~`` expanded, a relative path taken from ``base``
    (the config file's folder), so every command that reads one config uses one store, whatever the
    working directory it runs in (docs/config.md, "Paths")."""

    def anchored(value: str | None) -> str | None:
        if value is None:
            return None
        p = Path(value).expanduser()
        return os.path.abspath(p if p.is_absolute() else base / p)  # abspath: no "../" left in it

    ledger, trace = cfg.ledger, cfg.trace
    return cfg.model_copy(
        update={
            "ledger": ledger.model_copy(update={"path": anchored(ledger.path)}),
            "trace": trace.model_copy(update={"path": anchored(trace.path)}),
        }
    )
