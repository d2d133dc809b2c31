"""The hops of ``gateway_overhead.py`` beyond direct and floor: their configs, start-up and CPU accounting.

- ``tailgate``: ``tailgate serve``, one worker, every default feature on (gateway_yaml below);
- ``workers2``: the same config, ``tailgate serve --workers 2`` (a fixed port: the workers share it);
- ``redis``: the same config with ``state: {backend: redis}`` on a throw-away redis-server (docs/fleet.md);
- ``aiohttp-front``: the same config with ``server: {http_front: aiohttp}``: the /v1 POSTs through aiohttp's
  server instead of the gateway's own front door (gateway/http/lean_connection.py), for the A/B of that choice;
- ``baseline``: the same config served by another tailgate tree (``--baseline SRC``: its ``src`` directory on
  ``PYTHONPATH``, e.g. a checkout of an older commit), for a before / after in one run;
- ``litellm``: LiteLLM's proxy (a pinned ``litellm[proxy]`` in ``benchmarks/.venv-litellm``, created here
  on request), one uvicorn worker, the same simulator as an ``openai/`` model, no database, nothing fetched.

Every gateway hop gets its own ledger file, and in it its own store key (``tailgate keys create``) with an
rpm, a tpm, a concurrency limit and two budgets, all far above what a run can spend: the key wrk sends.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench_sim import Server, proc_cpu_s, server, stop_process

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LITELLM_VERSION = "1.106.12"
"""Pinned: the newest release whose ``[proxy]`` extra installs from the package index here (1.109+ need a
``litellm-proxy-extras`` release the index does not have)."""
LITELLM_VENV = HERE / ".venv-litellm"
LITELLM_KEY = "sk-bench-litellm"
"""LiteLLM's ``master_key``: it checks every request's bearer, as tailgate checks its keys."""
UPSTREAM_KEY = "sk-bench-upstream"
YAML_KEY = "sk-bench-client"
"""The YAML key (the platform team's own); wrk sends the store key instead."""

_GATEWAY_YAML = """\
listen: {{host: 127.0.0.1, port: 0}}
keys:
  - {{id: bench, key: {yaml_key}}}
providers:
  sim:
    base_url: "{upstream}/v1"
    api_keys: ["{upstream_key}"]
    price: {{input: 2.0, output: 3.0}}
  sim-b:
    base_url: "{upstream}/v1"
    api_keys: ["{upstream_key}"]
    price: {{input: 2.0, output: 3.0}}
models:
  bench:
    routes:
      - {{provider: sim, model: bench}}
      - {{provider: sim-b, model: bench}}
ledger: {{enabled: true, path: "{ledger}"}}
"""

_STATE_YAML = """\
state: {{backend: redis, url: "{url}", namespace: "{namespace}"}}
"""

_LITELLM_YAML = """\
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: "{upstream}/v1"
      api_key: "{upstream_key}"
litellm_settings:
  telemetry: false
general_settings:
  master_key: "{master_key}"
"""

LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the bundled price map, not a download at import
    "LITELLM_LOCAL_BLOG_POSTS": "true",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "true",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "true",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "true",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "true",
    "LITELLM_MODE": "PRODUCTION",  # no .env loading
    "LITELLM_LOG": "ERROR",
}
"""Nothing phones home, no database (no ``DATABASE_URL``): the proxy with a master key and one model."""


@dataclass(frozen=True)
class Hop:
    """A server wrk drives, the bearer it sends there, and (for tailgate's hops) the ledger to check."""

    name: str
    server: Server
    bearer: str = YAML_KEY
    gateway: bool = False
    ledger: Path | None = None
    log: Path | None = None
    helper: int | None = None
    """A process the hop depends on, its CPU counted apart (the redis hop's redis-server)."""


def gateway_yaml(
    workdir: Path, name: str, upstream: str, *, redis_url: str | None = None, extra_yaml: str = ""
) -> tuple[Path, Path]:
    """Write hop ``name``'s config (its own ledger; Redis state when given; ``extra_yaml`` appended);
    returns (config, ledger)."""
    ledger = workdir / f"{name}-ledger.db"
    text = _GATEWAY_YAML.format(yaml_key=YAML_KEY, upstream=upstream, upstream_key=UPSTREAM_KEY, ledger=ledger)
    text += extra_yaml
    if redis_url is not None:
        text += _STATE_YAML.format(url=redis_url, namespace=f"bench-{name}")
    cfg = workdir / f"{name}.yaml"
    cfg.write_text(text)
    return cfg, ledger


def store_key(config: Path, pythonpath: Path | None = None) -> str:
    """Create the hop's team key in its store (``tailgate keys create``): limits and budgets never reached.

    With ``pythonpath`` the key is made by that tree's tailgate, the one that serves the store: a newer tree
    would migrate the store to a schema the older one refuses to open."""
    argv = [sys.executable, "-m", "tailgate", "keys", "create", "--config", str(config), "--id", "team-bench"]
    if pythonpath is not None:
        argv = ["env", f"PYTHONPATH={pythonpath}", *argv]
    argv += ["--rpm", "1000000000", "--tpm", "1000000000", "--max-concurrency", "100000"]
    argv += ["--budget", "100000M tokens/day", "--budget", "1000000/month", "--meta", "team=bench", "--json"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return str(json.loads(out.stdout)["key"])


def gateway_argv(config: Path, *, workers: int = 1, port: int = 0) -> list[str]:
    argv = [sys.executable, "-m", "tailgate", "serve", "--config", str(config), "--port", str(port)]
    return argv + (["--workers", str(workers)] if workers > 1 else [])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(log: Path, count: int, timeout_s: float = 60.0) -> None:
    """Wait until ``count`` processes logged ``listening on`` (every worker of ``--workers N`` binds)."""
    deadline = time.monotonic() + timeout_s
    while len(re.findall(r"listening on http://", log.read_text())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} workers did not all start:\n{log.read_text()}")
        time.sleep(0.05)


# -- CPU of a process tree -------------------------------------------------------------------------


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc``: the workers of ``--workers N``, a proxy's helpers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def tree_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` and every descendant alive now (None where /proc is missing)."""
    own = proc_cpu_s(pid)
    if own is None:
        return None
    return own + sum(proc_cpu_s(p) or 0.0 for p in tree_pids(pid)[1:])


# -- LiteLLM ---------------------------------------------------------------------------------------


def litellm_ready() -> bool:
    """The benchmark's LiteLLM venv holds the pinned version (a marker written after a good install)."""
    marker = LITELLM_VENV / "tailgate-pin"
    return marker.exists() and marker.read_text().strip() == LITELLM_VERSION and (LITELLM_VENV / "bin/litellm").exists()


def install_litellm(log: Path) -> None:
    """Create ``benchmarks/.venv-litellm`` and install ``litellm[proxy]==LITELLM_VERSION`` (about a minute)."""
    if litellm_ready():
        return
    py = LITELLM_VENV / "bin" / "python"
    with log.open("w") as out:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], stdout=out, stderr=out, check=True)
        pip = [str(py), "-m", "pip", "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"]
        done = subprocess.run(pip, stdout=out, stderr=out, timeout=900, check=False)
    if done.returncode != 0:
        tail = "\n".join(ln for ln in log.read_text().splitlines() if "is ignored" not in ln)[-2000:]
        raise RuntimeError(f"pip install litellm[proxy]=={LITELLM_VERSION} failed:\n{tail}")
    (LITELLM_VENV / "tailgate-pin").write_text(LITELLM_VERSION + "\n")


def litellm_version() -> str | None:
    try:
        out = subprocess.run(
            [str(LITELLM_VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


@contextlib.contextmanager
def litellm_server(workdir: Path, upstream: str, timeout_s: float = 120.0) -> Iterator[Server]:
    """``litellm --config … --num_workers 1`` in front of ``upstream``; ready when /health/liveliness answers."""
    cfg = workdir / "litellm.yaml"
    cfg.write_text(_LITELLM_YAML.format(upstream=upstream, upstream_key=UPSTREAM_KEY, master_key=LITELLM_KEY))
    port = free_port()
    argv = [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(cfg), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--num_workers", "1"]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | LITELLM_ENV
    log_path = workdir / "litellm.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/health/liveliness", timeout=2) as resp,  # noqa: S310
            ):
                if resp.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"litellm did not start:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.2)
        yield Server("litellm", url, proc.pid)
    finally:
        stop_process(proc, 15.0)


@contextlib.contextmanager
def gateway_server(name: str, argv: list[str], log: Path, *, workers: int = 1) -> Iterator[Server]:
    """``tailgate serve``: started, and with ``workers`` > 1 every worker listening."""
    with server(name, argv, log, pin=False) as srv:
        if workers > 1:
            wait_listening(log, workers)
        yield srv


@contextlib.contextmanager
def gateway_hop(
    workdir: Path,
    name: str,
    upstream: str,
    *,
    workers: int = 1,
    redis_url: str | None = None,
    extra_yaml: str = "",
    pythonpath: Path | None = None,
) -> Iterator[Hop]:
    """A tailgate hop: its config, ledger and store key, then ``tailgate serve`` (``--workers N``: a fixed port);
    with ``pythonpath`` the tailgate package is imported from there (``env`` execs the interpreter: same pid)."""
    cfg, ledger = gateway_yaml(workdir, name, upstream, redis_url=redis_url, extra_yaml=extra_yaml)
    bearer = store_key(cfg, pythonpath)
    log = workdir / ("gateway.log" if name == "tailgate" else f"{name}.log")
    argv = gateway_argv(cfg, workers=workers, port=free_port() if workers > 1 else 0)
    if pythonpath is not None:
        argv = ["env", f"PYTHONPATH={pythonpath}", *argv]
    with gateway_server(name, argv, log, workers=workers) as srv:
        yield Hop(name, srv, bearer=bearer, gateway=True, ledger=ledger, log=log)


def redis_commands(port: int) -> dict[str, int] | None:
    """The redis-server's command counts: ``commands`` (``total_commands_processed``, which counts the
    commands a Lua script runs as well) and ``scripts`` (EVAL/EVALSHA/FCALL calls: round trips of a take)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"INFO stats\r\nINFO commandstats\r\nPING\r\n")
            data = b""
            while not data.endswith(b"+PONG\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    total = re.search(rb"total_commands_processed:(\d+)", data)
    scripts = re.findall(rb"cmdstat_(?:eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro):calls=(\d+)", data)
    if total is None:
        return None
    return {"commands": int(total.group(1)), "scripts": sum(int(x) for x in scripts)}


def metric_sum(text: str, name: str, labels: str = "") -> float:
    """The sum of every sample of ``name`` (Prometheus text) whose labels contain ``labels``."""
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        if labels in (match.group(1) or ""):
            total += float(match.group(2))
    return total
