"""The logic of ``tailgate keys …`` and ``tailgate usage`` (cli.py only parses flags and calls these).

Both find the store from the gateway config: ``ledger.url`` (PostgreSQL: the whole fleet), else
``ledger.path`` / ``$TAILGATE_DB`` / the XDG default (``--db`` overrides). Each returns the exit code:
0 ok, 1 the operation was refused (unknown key, duplicate id), 2 bad flags, config or store.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailgate.config.units import parse_duration
from tailgate.ledger.keys import KeyStoreError, create_key, keys_with_spend, revoke_key, update_key
from tailgate.ledger.paths import default_db_path
from tailgate.ledger.schema import SchemaError
from tailgate.ledger.store import StoreConn, StoreError, StoreSetUpError, is_postgres_url, open_store, redact_url
from tailgate.ledger.usage import DIMENSIONS, Dimension, hit_rate, usage

__all__ = [
    "KeyOptions",
    "StoreSummary",
    "check_store",
    "keys_main",
    "parse_budget",
    "parse_expiry",
    "store_summary",
    "store_target",
    "usage_main",
]

Echo = Callable[[str], None]

_BUDGET = re.compile(
    r"^\s*(?P<n>[0-9]+(?:\.[0-9]*)?)\s*(?P<mult>[kKmM])?\s*(?P<tokens>tokens?)?\s*(?:[A-Za-z]{3})?\s*/\s*"
    r"(?P<period>day|month)\s*$"
)


def parse_budget(spec: str) -> tuple[str, float]:
    """``200k tokens/day`` → (``tokens_per_day``, 200000); ``5/month`` or ``5 CNY/month`` → (``cost_per_month``, 5)."""
    m = _BUDGET.match(spec)
    if m is None:
        raise ValueError(
            f"--budget {spec!r}: expected AMOUNT[k|M] tokens/day|month (a token budget) or AMOUNT/day|month "
            "(money, in the providers' price currency), e.g. '200k tokens/day' or '5/month'"
        )
    value = float(m["n"]) * {None: 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6}[m["mult"]]
    kind = "tokens" if m["tokens"] else "cost"
    if value <= 0:
        raise ValueError(f"--budget {spec!r}: must be more than 0")
    return f"{kind}_per_{m['period']}", (int(value) if kind == "tokens" else value)


def parse_expiry(text: str, now: float) -> float | None:
    """``30d`` (from now), ``2027-01-31`` / ``2027-01-31T12:00:00`` (UTC), Unix seconds, or ``never``."""
    if text.strip().lower() in ("never", "none"):
        return None
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
        try:
            import calendar

            return float(calendar.timegm(time.strptime(text.strip(), fmt)))
        except ValueError:
            continue
    try:
        seconds = float(parse_duration(text))
    except ValueError:
        raise ValueError(f"--expires {text!r}: expected a duration (30d), a UTC date (2027-01-31) or 'never'") from None
    if seconds > 1e9:  # Unix seconds
        return seconds
    return now + seconds


def store_target(config_path: Path | None, db: Path | None) -> str | Path:
    """``--db``, else the config's ``ledger.url``, else its ``ledger.path``, else the default store."""
    if db is not None:
        return db
    if config_path is not None:
        from tailgate.config.schema import load_gateway_config

        config = load_gateway_config(config_path)
        if config.ledger.url:
            return config.ledger.url
        if config.ledger.path:
            return Path(config.ledger.path).expanduser()
    return default_db_path()


def check_store(target: str | Path) -> str | None:
    """Before a replica starts: the reason it must not, or None. A store written by a newer tailgate, and a
    PostgreSQL that refuses the login (role or database missing, wrong password) are reasons; an unreachable
    PostgreSQL is not (the spool holds the rows until it is back): it is only logged."""
    import logging
    import sqlite3

    try:
        open_store(target, connect_timeout=3.0).close()
    except SchemaError as exc:
        return f"the store at {_where(target)}: {exc}"
    except StoreSetUpError as exc:
        return str(exc)
    except StoreError as exc:
        logging.getLogger("tailgate.ledger").warning("%s; rows wait in the local spool until it is back", exc)
    except (OSError, sqlite3.Error) as exc:  # a SQLite file that cannot be created or opened
        return f"cannot open the store at {target}: {getattr(exc, 'strerror', None) or exc}"
    return None


@dataclass(frozen=True)
class StoreSummary:
    """What ``tailgate config check`` says about a config's store, read without writing to it."""

    where: str
    """The absolute path, or the URL without its password."""
    keys: int | None
    """Runtime keys in the store, revoked ones included (any key closes the gateway); None: not read."""
    note: str = ""
    """Why ``keys`` is None, or "not created yet"."""


def store_summary(target: str | Path) -> StoreSummary:
    """Count the store's keys without creating, migrating or locking anything (a read-only look)."""
    import sqlite3

    where = _where(target if isinstance(target, str) else Path(os.path.abspath(Path(target).expanduser())))
    if isinstance(target, Path) or not is_postgres_url(target):
        path = Path(target).expanduser()
        if not path.exists():
            return StoreSummary(where, 0, "not created yet")
        try:
            with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as raw:
                return StoreSummary(where, _count_keys(raw))
        except sqlite3.Error as exc:
            return StoreSummary(where, None, f"cannot read it: {exc}")
    from tailgate.ledger.pg import connect

    try:
        conn = connect(target, connect_timeout=3.0, migrate_schema=False)
    except StoreError as exc:
        return StoreSummary(where, None, str(exc))
    try:
        return StoreSummary(where, _count_keys(conn))
    except Exception as exc:  # psycopg.Error: a database that is not (yet) a tailgate store
        return StoreSummary(where, None, f"cannot read it: {str(exc).splitlines()[0] if str(exc) else exc}")
    finally:
        conn.close()


def _count_keys(conn: Any) -> int:
    try:
        row = conn.execute("SELECT count(*) FROM keys").fetchone()
    except Exception:  # no keys table yet: a store no command has opened (created at first use)
        return 0
    return int(row[0])


def _where(target: str | Path) -> str:
    return redact_url(target) if isinstance(target, str) else str(target)


@dataclass
class KeyOptions:
    """Flags of ``keys create`` / ``keys update`` (None: not given; the string ``none`` clears a limit)."""

    rpm: str | None = None
    tpm: str | None = None
    max_concurrency: str | None = None
    budgets: tuple[str, ...] = ()
    no_budget: bool = False
    models: str | None = None
    traffic_class: str | None = None
    expires: str | None = None
    meta: tuple[str, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)

    def changes(self, now: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("rpm", "tpm", "max_concurrency"):
            text = getattr(self, name)
            if text is None:
                continue
            if text.strip().lower() == "none":
                out[name] = None
                continue
            try:
                out[name] = float(text) if name != "max_concurrency" else int(text)
            except ValueError:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} {text!r}: expected a number (or 'none' for no limit)") from None
        if self.no_budget:
            out.update(tokens_per_day=None, tokens_per_month=None, cost_per_day=None, cost_per_month=None)
        for spec in self.budgets:
            name, value = parse_budget(spec)
            out[name] = value
        if self.models is not None:
            listed = self.models.strip()
            out["models"] = None if listed.lower() in ("", "all", "none") else [m.strip() for m in listed.split(",")]
        if self.traffic_class is not None:
            out["traffic_class"] = self.traffic_class or None
        if self.expires is not None:
            out["expires_at"] = parse_expiry(self.expires, now)
        if self.meta:
            meta = {}
            for item in self.meta:
                label, sep, text = item.partition("=")
                if not sep or not label:
                    raise ValueError(f"--meta {item!r}: expected NAME=VALUE (e.g. team=search)")
                meta[label.strip()] = text.strip()
            out["metadata"] = meta
        return out


def _describe(entry: dict[str, Any]) -> str:
    limits = []
    for name, label in (("rpm", "rpm"), ("tpm", "tpm"), ("max_concurrency", "conc")):
        if entry.get(name) is not None:
            limits.append(f"{label} {entry[name]:.10g}")
    for name, label in (
        ("tokens_per_day", "tok/day"),
        ("tokens_per_month", "tok/month"),
        ("cost_per_day", "cost/day"),
        ("cost_per_month", "cost/month"),
    ):
        if entry.get(name) is not None:
            limits.append(f"{label} {entry[name]:.10g}")
    return ", ".join(limits) or "-"


def keys_main(
    action: str,
    target: str | Path,
    echo: Echo,
    *,
    key_id: str | None = None,
    options: KeyOptions | None = None,
    as_json: bool = False,
) -> int:
    """``tailgate keys create|list|update|revoke``."""
    now = time.time()
    try:
        changes = options.changes(now) if options is not None else {}
    except ValueError as exc:
        echo(f"error: {exc}")
        return 2
    try:
        with open_store(target) as conn:
            return _keys(action, conn, echo, key_id, changes, as_json, now)
    except KeyStoreError as exc:
        echo(f"error: {exc}")
        return 1
    except (StoreError, SchemaError) as exc:
        echo(f"error: cannot use the store at {_where(target)}: {exc}")
        return 2


def _keys(
    action: str, conn: StoreConn, echo: Echo, key_id: str | None, changes: dict[str, Any], as_json: bool, now: float
) -> int:
    if action == "create":
        assert key_id is not None
        rec, secret = create_key(conn, key_id, now=now, **changes)
        if as_json:
            echo(json.dumps({"key": secret, **rec.public(now)}, indent=2))
        else:
            public = rec.public(now)
            models = ", ".join(public["models"]) if public.get("models") is not None else "all"
            echo(f"created key {rec.id} (models: {models}; limits: {_describe(public)})")
            echo(secret)
            echo("Store this key now: only its hash is kept, it cannot be shown again.")
        return 0
    if action == "update":
        assert key_id is not None
        rec = update_key(conn, key_id, now=now, **changes)
        echo(
            json.dumps(rec.public(now), indent=2) if as_json else f"updated key {rec.id} ({_describe(rec.public(now))})"
        )
        return 0
    if action == "revoke":
        assert key_id is not None
        rec = revoke_key(conn, key_id, now=now)
        echo(json.dumps(rec.public(now), indent=2) if as_json else f"revoked key {rec.id}")
        return 0
    entries = keys_with_spend(conn, now)
    if as_json:
        echo(json.dumps({"keys": entries}, indent=2, ensure_ascii=False))
        return 0
    if not entries:
        echo("no keys in the store (create one with `tailgate keys create --config FILE --id NAME`)")
        return 0
    echo(f"{'id':<20} {'state':<8} {'models':<20} {'tokens today':>13} {'cost today':>11} {'cost month':>11}  limits")
    for e in entries:
        models = ",".join(e["models"]) if e["models"] else "all"
        day, month = e["spend"]["day"], e["spend"]["month"]
        echo(
            f"{e['id']:<20} {e['state']:<8} {models[:20]:<20} {day['tokens']:>13} {day['cost']:>11.4f} "
            f"{month['cost']:>11.4f}  {_describe(e)}"
        )
    return 0


def usage_main(
    target: str | Path, echo: Echo, *, by: Dimension, since_s: float, fmt: str = "table", now: float | None = None
) -> int:
    """``tailgate usage``: requests, tokens and spend per group since ``now - since_s`` (whole hours)."""
    if by not in DIMENSIONS:
        echo(f"error: --by {by!r}: choose from {', '.join(DIMENSIONS)}")
        return 2
    at = time.time() if now is None else now
    if isinstance(target, Path) and not target.exists():
        echo(f"error: no tailgate database at {target} (give --config with the gateway's ledger, or --db)")
        return 2
    try:
        with open_store(target) as conn:
            groups = usage(conn, since=at - since_s, by=by)
    except (StoreError, SchemaError) as exc:
        echo(f"error: cannot read the store at {_where(target)}: {exc}")
        return 2
    if fmt == "json":
        echo(json.dumps(groups, indent=2, ensure_ascii=False))
        return 0
    # `refused` and the cache columns come last: they were added after the others, and scripts read the CSV
    # by position too
    columns = [
        by,
        "requests",
        "errors",
        "input_tokens",
        "output_tokens",
        "cost",
        "refused",
        "cached_tokens",
        "reported_prompt_tokens",
        "cache_hit_rate",
    ]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(groups)
        echo(out.getvalue().rstrip("\n"))
        return 0
    if not groups:
        start = time.strftime("%Y-%m-%d %H:00", time.gmtime(at - since_s))
        echo(f"no requests in the store at {_where(target)} since {start} UTC")
        return 0
    # The first column is as wide as its longest name: a key id or model is never cut short.
    w = max(24, len(by), *(len(str(g[by])) for g in groups))
    echo(
        f"{by:<{w}} {'requests':>10} {'errors':>8} {'refused':>8} {'input tok':>12} {'output tok':>12} {'cost':>12} "
        f"{'cached tok':>12} {'hit rate':>8}"
    )
    for g in groups:
        echo(
            f"{g[by]!s:<{w}} {g['requests']:>10} {g['errors']:>8} {g['refused']:>8} {g['input_tokens']:>12} "
            f"{g['output_tokens']:>12} {g['cost']:>12.6f} {g['cached_tokens']:>12} {_rate(g['cache_hit_rate']):>8}"
        )
    total = {c: sum(g[c] for g in groups) for c in columns[1:-1]}
    rate = hit_rate(int(total["cached_tokens"]), int(total["reported_prompt_tokens"]))
    echo(
        f"{'total':<{w}} {total['requests']:>10} {total['errors']:>8} {total['refused']:>8} "
        f"{total['input_tokens']:>12} {total['output_tokens']:>12} {total['cost']:>12.6f} "
        f"{total['cached_tokens']:>12} {_rate(rate):>8}"
    )
    return 0


def _rate(rate: float | None) -> str:
    """A cache-hit rate as the table shows it: ``-`` when no request of the group reported cached tokens."""
    return "-" if rate is None else f"{rate * 100:.1f}%"
