"""What the OTLP export does, resolved once from the config section and the standard ``OTEL_*`` variables.

Pure: :func:`resolve` reads a config section (or None) and an environment mapping and answers
:class:`Settings` (or None: off). The rules (docs/config.md, "telemetry"):

- ``OTEL_SDK_DISABLED=true`` turns everything off, whatever the file says (the SDK's own kill switch).
- Otherwise the export is on when the ``telemetry:`` section is present and not ``enabled: false``, or, with no
  section, when the environment asks for an OTLP export: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its ``_TRACES_`` /
  ``_METRICS_`` form) set, or ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` naming ``otlp``.
- Each field the section leaves unset takes its variable, then the default. A signal-specific variable
  (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is a full URL and wins over the base endpoint for that signal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tailgate.config.telemetry_config import TelemetryConfig

__all__ = ["DEFAULT_SERVICE", "Settings", "SettingsError", "parse_headers", "resolve"]

DEFAULT_SERVICE = "tailgate-gateway"
_DEFAULT_ENDPOINT = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}
_PATHS = {"traces": "/v1/traces", "metrics": "/v1/metrics"}
_TRUE = frozenset({"true", "1", "yes", "on"})

Signal = Literal["traces", "metrics"]


class SettingsError(ValueError):
    """An ``OTEL_*`` variable whose value cannot be used; the message names the variable (never a header value)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The export as resolved (see the module docstring)."""

    protocol: Literal["http/protobuf", "grpc"]
    traces_endpoint: str | None
    """Where spans go (a full URL for HTTP, ``host:port`` URL for gRPC); None: no span export."""
    metrics_endpoint: str | None
    """Where the GenAI metrics go; None: no metric export."""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    service_name: str = DEFAULT_SERVICE
    sample_ratio: float = 1.0
    max_queue_size: int = 2048
    max_export_batch_size: int = 512
    schedule_delay_s: float = 1.0
    export_timeout_s: float = 10.0
    metric_interval_s: float = 10.0
    capture_content: bool = False
    content_max_chars: int = 2000
    redact: tuple[str, ...] = ()


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def _names(value: str | None) -> set[str]:
    return {v.strip().lower() for v in (value or "").split(",") if v.strip()}


def parse_headers(value: str, name: str = "OTEL_EXPORTER_OTLP_HEADERS") -> dict[str, str]:
    """``key1=value1,key2=value2`` (values URL-encoded, as the OTLP exporter spec says) → a dict."""
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{name}: each entry must be key=value (an entry without '=' was found)")
        out[unquote(key.strip()).lower()] = unquote(val.strip())
    return out


def _number(env: Mapping[str, str], name: str, *, scale: float = 1.0, integer: bool = False) -> float | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None
    if value <= 0 or (integer and value != int(value)):
        raise SettingsError(f"{name}={raw!r} must be a positive {'whole ' if integer else ''}number")
    return value * scale


def _endpoint(signal: Signal, section: TelemetryConfig | None, env: Mapping[str, str], protocol: str) -> str | None:
    """The URL ``signal`` is exported to, or None when that signal is off."""
    own = None if section is None else (section.traces if signal == "traces" else section.metrics)
    exporter = env.get(f"OTEL_{signal.upper()}_EXPORTER")
    if own is False or (own is None and exporter is not None and "otlp" not in _names(exporter)):
        return None  # OTEL_TRACES_EXPORTER=none (or only exporters this gateway does not have)
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    base = section.endpoint if section is not None and section.endpoint else None
    if base is None and specific:
        return specific  # a full URL already (the OTLP exporter spec)
    base = base or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or _DEFAULT_ENDPOINT[protocol]
    if protocol == "grpc":
        return base
    return base.rstrip("/") + _PATHS[signal]


def _asked(env: Mapping[str, str]) -> bool:
    """Does the environment alone ask for an OTLP export?"""
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        or "otlp" in _names(env.get("OTEL_TRACES_EXPORTER"))
        or "otlp" in _names(env.get("OTEL_METRICS_EXPORTER"))
    )


def _ratio(section: TelemetryConfig | None, env: Mapping[str, str]) -> float:
    if section is not None and section.sample_ratio is not None:
        return section.sample_ratio
    sampler = (env.get("OTEL_TRACES_SAMPLER") or "").strip().lower()
    if sampler in ("always_off", "parentbased_always_off"):
        return 0.0
    if sampler in ("traceidratio", "parentbased_traceidratio"):
        arg = env.get("OTEL_TRACES_SAMPLER_ARG")
        try:
            value = float(arg) if arg is not None else 1.0
        except ValueError:
            raise SettingsError(f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a number in [0, 1]") from None
        if not 0.0 <= value <= 1.0:
            raise SettingsError(f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a number in [0, 1]")
        return value
    return 1.0


def resolve(section: TelemetryConfig | None, env: Mapping[str, str]) -> Settings | None:
    """The export the config and environment ask for, or None (off). Raises :class:`SettingsError` for a
    variable whose value cannot be used."""
    if _flag(env.get("OTEL_SDK_DISABLED")):
        return None
    if section is not None and section.enabled is False:
        return None
    if section is None and not _asked(env):
        return None
    protocol = (section.protocol if section is not None else None) or (
        env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    ).strip()
    if protocol not in _DEFAULT_ENDPOINT:
        raise SettingsError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: tailgate exports http/protobuf or grpc")
    headers = parse_headers(env["OTEL_EXPORTER_OTLP_HEADERS"]) if env.get("OTEL_EXPORTER_OTLP_HEADERS") else {}
    if section is not None and section.headers:
        headers = {k.lower(): v.get_secret_value() for k, v in section.headers.items()}
    c = section
    queue = _number(env, "OTEL_BSP_MAX_QUEUE_SIZE", integer=True)
    batch = _number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", integer=True)
    delay = _number(env, "OTEL_BSP_SCHEDULE_DELAY", scale=1e-3)
    timeout = _number(env, "OTEL_EXPORTER_OTLP_TIMEOUT", scale=1e-3)
    interval = _number(env, "OTEL_METRIC_EXPORT_INTERVAL", scale=1e-3)
    max_queue = int((c.max_queue_size if c is not None and c.max_queue_size else None) or queue or 2048)
    max_batch = int((c.max_export_batch_size if c is not None and c.max_export_batch_size else None) or batch or 512)
    return Settings(
        protocol=protocol,  # type: ignore[arg-type]  # checked above
        traces_endpoint=_endpoint("traces", section, env, protocol),
        metrics_endpoint=_endpoint("metrics", section, env, protocol),
        headers=headers,
        service_name=(c.service_name if c is not None else None) or env.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE,
        sample_ratio=_ratio(section, env),
        max_queue_size=max_queue,
        max_export_batch_size=min(max_batch, max_queue),
        schedule_delay_s=(c.schedule_delay if c is not None and c.schedule_delay else None) or delay or 1.0,
        export_timeout_s=(c.export_timeout if c is not None and c.export_timeout else None) or timeout or 10.0,
        metric_interval_s=(c.metric_interval if c is not None and c.metric_interval else None) or interval or 10.0,
        capture_content=c.content.enabled if c is not None else False,
        content_max_chars=c.content.max_chars if c is not None else 2000,
        redact=tuple(c.content.redact) if c is not None else (),
    )
