"""One store, whatever the working directory: relative paths in a config are taken from the config file's
folder, every command that opens a store names it on stderr, and ``config check`` shows state and store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tailgate.config.resolve import load_resolved

_CONFIG = """\
providers:
  p: {base_url: "http://127.0.0.1:9/v1"}
models:
  m: {routes: [{provider: p, model: x}]}
ledger: {path: "${TG_PATHS_DB:-./data/tailgate.db}"}
trace: {path: traces/trace.jsonl}
"""


def _tailgate(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TAILGATE_DB", "TG_PATHS_DB")}
    return subprocess.run(
        [sys.executable, "-m", "tailgate", *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def test_relative_paths_are_taken_from_the_config_files_folder(tmp_path: Path) -> None:
    """``./data/tailgate.db`` and ``traces/trace.jsonl`` in /x/conf/gateway.yaml mean /x/conf/data/… and
    /x/conf/traces/…, whatever the working directory; ``~`` is expanded; an absolute path stays."""
    conf = tmp_path / "conf"
    conf.mkdir()
    path = conf / "gateway.yaml"
    path.write_text(_CONFIG, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = Path.cwd()
    try:
        os.chdir(elsewhere)
        config, _ = load_resolved(Path("..") / "conf" / "gateway.yaml", env={})
    finally:
        os.chdir(cwd)
    assert config.ledger.path == str(conf / "data" / "tailgate.db")
    assert config.trace.path == str(conf / "traces" / "trace.jsonl")
    home, _ = load_resolved(path, env={"TG_PATHS_DB": "~/tg.db"})
    assert home.ledger.path == str(Path.home() / "tg.db")
    absolute, _ = load_resolved(path, env={"TG_PATHS_DB": "/var/lib/tailgate/x.db"})
    assert absolute.ledger.path == "/var/lib/tailgate/x.db"


def test_keys_created_from_another_directory_land_in_the_configs_store(tmp_path: Path) -> None:
    """``keys create`` run from one directory and ``keys list`` from another, given the same config, use one
    store (the config's folder), and both say which on stderr; ``config check`` counts the key."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "gateway.yaml").write_text(_CONFIG, encoding="utf-8")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    store = conf / "data" / "tailgate.db"
    created = _tailgate("keys", "create", "--config", str(conf / "gateway.yaml"), "--id", "team-a", cwd=a)
    assert created.returncode == 0, created.stderr
    assert f"store: {store}" in created.stderr
    listed = _tailgate("keys", "list", "--json", "--config", "../conf/gateway.yaml", cwd=b)
    assert listed.returncode == 0, listed.stderr
    assert f"store: {store}" in listed.stderr
    assert [k["id"] for k in json.loads(listed.stdout)["keys"]] == ["team-a"]
    assert not (a / "data").exists()
    assert not (b / "data").exists()
    check = _tailgate("config", "check", "gateway.yaml", cwd=conf)
    assert check.returncode == 0, check.stderr
    assert f"store: {store} (1 key)" in check.stdout
    assert "gateway keys: 1 in the store (the gateway is closed)" in check.stdout
    assert "state: local (this process only)" in check.stdout
    as_json = json.loads(_tailgate("config", "check", "--json", "gateway.yaml", cwd=conf).stdout)
    assert as_json["store"] == {"where": str(store), "keys": 1, "note": None}
    assert as_json["state"] == {"backend": "local", "url": None}


def test_config_check_on_a_store_not_created_yet_creates_nothing(tmp_path: Path) -> None:
    """``config check`` only looks: a store that does not exist yet is reported as such and not created."""
    (tmp_path / "gateway.yaml").write_text(_CONFIG, encoding="utf-8")
    check = _tailgate("config", "check", "gateway.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert f"store: {tmp_path / 'data' / 'tailgate.db'} (0 keys; not created yet)" in check.stdout
    assert "gateway keys: none (open: any bearer is accepted, loopback only)" in check.stdout
    assert not (tmp_path / "data").exists()
