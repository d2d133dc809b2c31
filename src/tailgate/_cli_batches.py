"""``tailgate batches``: the operators' view of the gateway's Batch API (docs/batch.md, "Operators").

Talks to a running gateway over HTTP (``--url``, ``TAILGATE_URL``) with the admin key (``--key``,
``TAILGATE_ADMIN_KEY``): the admin key sees every key's batches. Registered on the main group by ``tailgate.cli``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import click

from tailgate._cli_util import _fail, _stdout

__all__ = ["batches"]

TERMINAL = ("completed", "failed", "expired", "cancelled")


def _options(fn: Any) -> Any:
    for option in reversed(
        (
            click.option(
                "--url",
                envvar="TAILGATE_URL",
                show_envvar=True,
                default="http://127.0.0.1:8080",
                show_default=True,
                help="The gateway's address.",
            ),
            click.option("--key", envvar="TAILGATE_ADMIN_KEY", show_envvar=True, help="The admin key (admin_key)."),
        )
    ):
        fn = option(fn)
    return fn


def _call(url: str, key: str | None, method: str, path: str) -> dict[str, Any]:
    if not key:
        _fail("the admin key is needed: --key or TAILGATE_ADMIN_KEY")
    if not url.startswith(("http://", "https://")):
        _fail(f"--url {url!r}: give the gateway's http:// or https:// address")
    req = urllib.request.Request(  # noqa: S310 (http(s) only, checked above)
        url.rstrip("/") + path,
        method=method,
        headers={"Authorization": f"Bearer {key}"},
        data=b"" if method == "POST" else None,
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 (http(s) only)
            out = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = exc.reason
        _fail(f"{method} {path}: HTTP {exc.code}: {message}")
    except (urllib.error.URLError, OSError) as exc:
        _fail(f"cannot reach the gateway at {url}: {exc}")
    assert isinstance(out, dict)
    return out


def _cost(b: dict[str, Any]) -> str:
    ext = b.get("tailgate") or {}
    cost = ext.get("cost")
    return "-" if cost is None else f"{cost:.4f} {ext.get('currency') or ''}".strip()


def _when(ts: int | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


@click.group()
def batches() -> None:
    """The gateway's batches (OpenAI Batch API): list, show, cancel, wait (docs/batch.md)."""


@batches.command("list")
@_options
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_batches(url: str, key: str | None, limit: int, as_json: bool) -> None:
    """Every key's batches, newest first."""
    page = _call(url, key, "GET", f"/v1/batches?limit={limit}")
    data = page.get("data", [])
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    from rich.table import Table

    table = Table("id", "status", "endpoint", "done / failed / total", "cost", "created (UTC)")
    for b in data:
        c = b.get("request_counts") or {}
        table.add_row(
            b["id"],
            b["status"],
            b["endpoint"],
            f"{c.get('completed', 0)} / {c.get('failed', 0)} / {c.get('total', 0)}",
            _cost(b),
            _when(b.get("created_at")),
        )
    _stdout().print(table)


def _show(b: dict[str, Any]) -> None:
    c = b.get("request_counts") or {}
    lines = [
        f"{b['id']}  {b['status']}",
        f"  endpoint        {b['endpoint']}  (window {b['completion_window']})",
        f"  lines           {c.get('completed', 0)} done, {c.get('failed', 0)} failed, {c.get('total', 0)} in all",
        f"  cost            {_cost(b)}",
        f"  created         {_when(b.get('created_at'))}   expires {_when(b.get('expires_at'))}",
        f"  output file     {b.get('output_file_id') or '-'}",
        f"  error file      {b.get('error_file_id') or '-'}",
    ]
    if b.get("metadata"):
        lines.append(f"  metadata        {json.dumps(b['metadata'], ensure_ascii=False)}")
    for e in ((b.get("errors") or {}).get("data")) or []:
        where = f"line {e['line']}" if e.get("line") else "file"
        lines.append(f"  error           {where}: {e.get('message')}")
    for line in lines:
        click.echo(line)


def _wait(url: str, key: str | None, batch_id: str, interval: float) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    b = _call(url, key, "GET", f"/v1/batches/{batch_id}")
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
    ) as bar:
        task = bar.add_task(b["status"], total=(b.get("request_counts") or {}).get("total") or None)
        while True:
            c = b.get("request_counts") or {}
            bar.update(
                task,
                completed=c.get("completed", 0) + c.get("failed", 0),
                total=c.get("total") or None,
                description=f"{batch_id} {b['status']}",
            )
            if b["status"] in TERMINAL:
                return b
            time.sleep(interval)
            b = _call(url, key, "GET", f"/v1/batches/{batch_id}")


@batches.command("show")
@_options
@click.argument("batch_id")
@click.option("--wait", is_flag=True, help="Show a progress bar until the batch ends.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between polls (--wait).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(url: str, key: str | None, batch_id: str, wait: bool, interval: float, as_json: bool) -> None:
    """One batch: status, line counts, cost, files."""
    b = _wait(url, key, batch_id, interval) if wait else _call(url, key, "GET", f"/v1/batches/{batch_id}")
    if as_json:
        click.echo(json.dumps(b, indent=2))
    else:
        _show(b)


@batches.command("cancel")
@_options
@click.argument("batch_id")
@click.option("--wait", is_flag=True, help="Wait until it is cancelled (lines running finish first).")
@click.option("--interval", type=float, default=1.0, show_default=True)
def cancel(url: str, key: str | None, batch_id: str, wait: bool, interval: float) -> None:
    """Cancel a batch: lines not started are not run; the error file says so."""
    b = _call(url, key, "POST", f"/v1/batches/{batch_id}/cancel")
    if wait:
        b = _wait(url, key, batch_id, interval)
    _show(b)
