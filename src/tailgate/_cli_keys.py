"""``tailgate keys`` and ``tailgate usage``: runtime keys and spend in the store (docs/keys.md).

Registered on the main command group by ``tailgate.cli``; the logic lives in ``tailgate.ledger.commands``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tailgate._cli_util import _announce_store, _duration, _echo_line, _fail

__all__ = ["keys", "usage"]

_STORE_OPTIONS = (
    click.option("--config", "config_path", type=click.Path(path_type=Path), help="Gateway config: finds its store."),
    click.option("--db", type=click.Path(path_type=Path, dir_okay=False), help="A SQLite store instead (overrides)."),
)


def _store_options(fn: Any) -> Any:
    for option in reversed(_STORE_OPTIONS):
        fn = option(fn)
    return fn


def _key_options(fn: Any) -> Any:
    for option in reversed(
        (
            click.option("--rpm", help="Requests per minute ('none': no limit)."),
            click.option("--tpm", help="Tokens per minute, prompt + max_tokens reserved at admission ('none')."),
            click.option("--max-concurrency", help="Requests in flight at once ('none')."),
            click.option(
                "--budget",
                "budgets",
                multiple=True,
                help="'200k tokens/day', '5M tokens/month', '10/day' or '100/month' (money); repeatable. On update"
                " it sets that budget and keeps the key's others (--no-budget --budget … replaces them all).",
            ),
            click.option("--no-budget", is_flag=True, help="Remove every budget."),
            click.option(
                "--models",
                help="Comma-separated aliases this key may use ('all': any); with --config each must be one of its.",
            ),
            click.option("--class", "traffic_class", help="Default traffic class of this key's requests."),
            click.option("--expires", help="30d (from now), 2027-01-31 (UTC) or 'never'."),
            click.option("--meta", multiple=True, help="NAME=VALUE metadata (team=search, owner=ana); repeatable."),
            click.option("--json", "as_json", is_flag=True, help="Print JSON."),
        )
    ):
        fn = option(fn)
    return fn


def _store_target(config_path: Path | None, db: Path | None) -> Any:
    from tailgate.config import ConfigError
    from tailgate.ledger.commands import store_target

    try:
        target = store_target(config_path, db)
    except ConfigError as exc:
        _fail("invalid gateway config:\n" + "\n".join(f"  {p}" for p in exc.problems))
    _announce_store(target)
    return target


def _known_models(config_path: Path | None, models: str | None) -> None:
    """With a config, ``--models`` may name only its aliases (a typo would make a key that can call nothing)."""
    if config_path is None or models is None or models.strip().lower() in ("", "all", "none"):
        return
    from tailgate.config.resolve import load_resolved

    aliases = load_resolved(config_path)[0].models  # loaded once already by _store_target: it is valid
    unknown = [m.strip() for m in models.split(",") if m.strip() not in aliases]
    if unknown:
        _fail(f"--models: no alias {', '.join(map(repr, unknown))} in {config_path} (known: {', '.join(aliases)})")


@click.group()
def keys() -> None:
    """Runtime gateway keys in the store: limits, budgets, models, expiry (docs/keys.md)."""


@keys.command("create")
@_store_options
@click.option("--id", "key_id", required=True, help="The key's name (team-a): in the ledger, metrics and /admin/keys.")
@_key_options
def keys_create(config_path: Path | None, db: Path | None, key_id: str, as_json: bool, **flags: Any) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from tailgate.ledger.commands import KeyOptions, keys_main

    target = _store_target(config_path, db)
    _known_models(config_path, flags.get("models"))
    sys.exit(keys_main("create", target, _echo_line, key_id=key_id, options=KeyOptions(**flags), as_json=as_json))


@keys.command("list")
@_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def keys_list(config_path: Path | None, db: Path | None, as_json: bool) -> None:
    """Every key with its state, limits and spend today and this month."""
    from tailgate.ledger.commands import keys_main

    sys.exit(keys_main("list", _store_target(config_path, db), _echo_line, as_json=as_json))


@keys.command("update")
@_store_options
@click.argument("key_id")
@_key_options
def keys_update(config_path: Path | None, db: Path | None, key_id: str, as_json: bool, **flags: Any) -> None:
    """Change a key's limits, budgets, models, class, expiry or metadata."""
    from tailgate.ledger.commands import KeyOptions, keys_main

    target = _store_target(config_path, db)
    _known_models(config_path, flags.get("models"))
    sys.exit(keys_main("update", target, _echo_line, key_id=key_id, options=KeyOptions(**flags), as_json=as_json))


@keys.command("revoke")
@_store_options
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def keys_revoke(config_path: Path | None, db: Path | None, key_id: str, as_json: bool) -> None:
    """Revoke a key: every replica refuses it within about half a second."""
    from tailgate.ledger.commands import keys_main

    sys.exit(keys_main("revoke", _store_target(config_path, db), _echo_line, key_id=key_id, as_json=as_json))


@click.command()
@_store_options
@click.option("--by", type=click.Choice(["key", "alias", "provider", "day", "lane"]), default="key", show_default=True)
@click.option("--since", default="7d", show_default=True, help="How far back (rounded down to the hour): 24h, 7d, 30d.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV with a header row.")
def usage(config_path: Path | None, db: Path | None, by: str, since: str, as_json: bool, as_csv: bool) -> None:
    """Requests, tokens, spend and prompt-cache hit rate per key, alias, provider, day or lane (interactive,
    batch-lane, provider-batch), from the store (the whole fleet's)."""
    from tailgate.ledger.commands import usage_main

    if as_json and as_csv:
        _fail("--json and --csv: choose one")
    fmt = "json" if as_json else "csv" if as_csv else "table"
    target = _store_target(config_path, db)
    sys.exit(usage_main(target, _echo_line, by=by, since_s=_duration("--since", since), fmt=fmt))  # type: ignore[arg-type]
