"""`tailgate keys …` and `tailgate usage` against a real store on both backends (via the gateway config's
ledger.url for PostgreSQL): the key is printed once, limits round-trip, usage JSON/CSV match the rows."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from ledger_support import insert_rows, make_row

from tailgate.cli import main
from tailgate.ledger.keys import digest, get_key
from tailgate.ledger.store import StoreConn, open_store


def _config(tmp_path: Path, store_target: str) -> Path:
    ledger = f"url: '{store_target}'" if store_target.startswith("postgresql") else f"path: '{store_target}'"
    path = tmp_path / "gw.yaml"
    path.write_text(
        "providers:\n  p:\n    base_url: http://127.0.0.1:9/v1\n"
        "models:\n  chat:\n    routes: [{provider: p, model: m}]\n  code:\n    routes: [{provider: p, model: m}]\n"
        f"ledger:\n  {ledger}\n"
    )
    return path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_keys_create_list_update_revoke(tmp_path: Path, store_target: str, store: StoreConn) -> None:
    cfg = str(_config(tmp_path, store_target))
    code, out, _ = _run(
        "keys", "create", "--config", cfg, "--id", "team-a", "--tpm", "5000", "--budget", "200k tokens/day",
        "--budget", "5/month", "--models", "chat,code", "--meta", "team=search", "--expires", "30d",
    )  # fmt: skip
    assert code == 0, out
    assert "created key team-a (models: chat, code; limits: tpm 5000, tok/day 200000, cost/month 5)" in out
    secret = next(line for line in out.splitlines() if line.startswith("sk-"))
    rec = get_key(store, "team-a")
    assert rec is not None
    assert rec.key_sha256 == digest(secret)
    assert (rec.tpm, rec.tokens_per_day, rec.cost_per_month, rec.models) == (5000, 200_000, 5.0, ("chat", "code"))
    assert rec.metadata == {"team": "search"}

    code, _, err = _run("keys", "create", "--config", cfg, "--id", "team-a")
    assert code == 1
    assert "already exists" in err
    code, _, err = _run("keys", "create", "--config", cfg, "--id", "x", "--budget", "lots")
    assert code == 2
    assert "--budget 'lots'" in err

    assert _run("keys", "update", "--config", cfg, "team-a", "--tpm", "none", "--models", "all")[0] == 0
    rec = get_key(store, "team-a")
    assert rec is not None
    assert (rec.tpm, rec.models, rec.tokens_per_day) == (None, None, 200_000)
    assert _run("keys", "revoke", "--config", cfg, "team-a")[0] == 0
    code, out, _ = _run("keys", "list", "--config", cfg, "--json")
    listed = json.loads(out)["keys"]
    assert [(k["id"], k["state"]) for k in listed] == [("team-a", "revoked")]
    assert secret not in out
    assert _run("keys", "revoke", "--config", cfg, "nobody")[0] == 1


def test_usage_json_and_csv_match_the_rows(tmp_path: Path, store_target: str, store: StoreConn) -> None:
    import time

    now = time.time()
    rows = [
        make_row(i, ts=now - 60 * i, key_id=("team-a" if i % 3 else "team-b"), prompt_tokens=10 + i, output_tokens=i)
        for i in range(30)
    ]
    long_key = "search-team-production-batch-2026"  # longer than the table's first column used to allow
    rows.append(make_row(30, ts=now - 5, key_id=long_key, prompt_tokens=1, output_tokens=1))
    insert_rows(store, rows)
    cfg = str(_config(tmp_path, store_target))
    code, out, _ = _run("usage", "--config", cfg, "--by", "key", "--since", "7d", "--json")
    assert code == 0
    groups = {g["key"]: g for g in json.loads(out)}
    for key in ("team-a", "team-b", long_key):
        mine = [r for r in rows if r.key_id == key]
        assert groups[key]["requests"] == len(mine)
        assert groups[key]["input_tokens"] == sum(r.prompt_tokens or 0 for r in mine)
        assert groups[key]["output_tokens"] == sum(r.output_tokens or 0 for r in mine)
        assert groups[key]["cost"] == pytest.approx(sum(r.cost or 0 for r in mine))
    code, out, _ = _run("usage", "--config", cfg, "--by", "alias", "--csv")
    assert out.splitlines()[0] == (  # positions kept: new columns only ever at the end
        "alias,requests,errors,input_tokens,output_tokens,cost,refused,cached_tokens,reported_prompt_tokens,cache_hit_rate"
    )
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert [(p["alias"], int(p["requests"])) for p in parsed] == [("deepseek-v3.2", 31)]
    code, out, _ = _run("usage", "--config", cfg)
    assert "team-a" in out
    code, out, _ = _run("usage", "--config", cfg, "--by", "key")
    assert long_key in out  # whole, not cut to the column's old 24 characters
    assert "total" in out


def test_serve_refuses_a_newer_schema_in_postgres(tmp_path: Path, pg_url: str) -> None:
    with open_store(pg_url) as conn:
        conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (77, 0.0, "from a newer tailgate"))
    code, _, err = _run("serve", "--config", str(_config(tmp_path, pg_url)), "--port", "0")
    assert code == 2
    assert "schema version 77 is newer than this tailgate's" in err


def test_leaderboard_reads_the_configured_store(tmp_path: Path, store_target: str, store: StoreConn) -> None:
    """`tailgate leaderboard --config` reads the store the config names: the fleet's PostgreSQL with ledger.url."""
    import time

    now = time.time()
    cols = "ts, provider, model, workload, status, ttft_ms, e2e_ms, output_tokens, tok_s"
    with store.transaction():
        store.executemany(
            f"INSERT INTO samples ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
            [(now - 60 * i, "p", "m", "long", 200, 100.0 + i, 900.0 + i, 50, 60.0) for i in range(30)],
        )
    code, out, err = _run("leaderboard", "--config", str(_config(tmp_path, store_target)), "--window", "1h", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["rows"]
    assert (row["provider"], row["model"], row["samples"]) == ("p", "m", 30)
    assert row["ttft_p50_ms"] == 114.0


def test_usage_keeps_refusals_apart_from_errors(tmp_path: Path, store_target: str, store: StoreConn) -> None:
    """``refused`` (never sent upstream: no provider) and ``errors`` (failed after an attempt) are counted apart,
    the same from raw rows and from the hourly roll-ups."""
    import time

    from tailgate.ledger.usage import rollup, usage

    now = time.time()
    kinds = [("ok", "lanyun"), ("http_5xx", "lanyun"), ("budget_exceeded", None), ("rpm_limited", None)]
    rows = [
        make_row(i, ts=now - 60 * i, key_id="team-a", outcome=kinds[i % 4][0], provider=kinds[i % 4][1])
        for i in range(20)
    ]
    insert_rows(store, rows)
    raw = usage(store, since=now - 86400, by="key")
    assert [(g["key"], g["requests"], g["errors"], g["refused"]) for g in raw] == [("team-a", 20, 5, 10)]
    rollup(store)
    assert usage(store, since=now - 86400, by="key") == raw
    code, out, _ = _run("usage", "--config", str(_config(tmp_path, store_target)), "--csv")
    (parsed,) = list(csv.DictReader(io.StringIO(out)))
    assert (parsed["errors"], parsed["refused"]) == ("5", "10")
