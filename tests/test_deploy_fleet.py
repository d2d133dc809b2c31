"""The production recipe of deploy/, process for process, from Debian packages: nginx in front of three
``tailgate serve`` replicas (started as deploy/systemd/tailgate@.service starts them), Redis for their
state, PostgreSQL for their store (role and database from deploy/postgres/init.sql), Prometheus scraping
every replica, a simulated provider behind them. The config files are deploy/'s own, templated only for
ports and paths (and the providers' addresses: the simulator). The container image itself is not built here.

What it proves: traffic through nginx succeeds; a key created with the CLI works on every replica within a
second; Prometheus's own query API sees all three replicas; a replica stopped (SIGTERM) and another one
killed (SIGKILL) under traffic cost no client request through nginx; promtool, nginx -t, systemd-analyze
and docker-compose accept the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from _require import require
from conftest import MockProcess
from pg_cluster import PostgresCluster, find_bin, postgres_available
from tailgate.state.server import RedisServer, find_redis_server

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
CLIENT_KEY = "tg-deploy-client-key-0123"
ADMIN_KEY = "tg-deploy-admin-key-0123"
PG_PASSWORD = "deploy-pg-password"


def _need(name: str, found: str | None, package: str) -> str:
    """The binary's path; a missing one skips here and fails under CI (tests/_require.py: .ci/run installs it)."""
    require(found, name, f"apt-get install {package}", name=name)
    assert found is not None
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback http URL we built
        return json.loads(response.read())


# -- static checks of the files, each with the validator the recipe names ----------------------------------


def test_promtool_accepts_both_prometheus_files() -> None:
    """``promtool check config`` on the Compose file's and the VMs' Prometheus config, as shipped."""
    promtool = _need("promtool", shutil.which("promtool"), "prometheus")
    for path in (DEPLOY / "prometheus.yml", DEPLOY / "systemd" / "prometheus.yml"):
        done = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_systemd_units_verify_clean(tmp_path: Path) -> None:
    """``systemd-analyze verify`` finds nothing to say about the units (the binary path made one that exists)."""
    analyze = _need("systemd-analyze", shutil.which("systemd-analyze"), "systemd")
    tailgate = str(Path(sys.executable).with_name("tailgate"))
    units = []
    for src, name in (
        ("tailgate@.service", "tailgate@8081.service"),
        ("tailgate-monitor.service", None),
        ("tailgate-otelcol.service", None),
    ):
        text = (DEPLOY / "systemd" / src).read_text(encoding="utf-8").replace("/opt/tailgate/bin/tailgate", tailgate)
        # The collector's binary (its own Debian package, not installable here): any executable stands in.
        text = text.replace("/usr/bin/otelcol-contrib", tailgate)
        unit = tmp_path / (name or src)
        unit.write_text(text, encoding="utf-8")
        units.append(str(unit))
    done = subprocess.run([analyze, "verify", *units], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # an unknown key is only a warning: none allowed


def test_docker_compose_validates_the_compose_file(tmp_path: Path) -> None:
    """Debian's docker-compose ``config`` accepts deploy/compose.yaml with deploy/.env.example as its .env."""
    compose = _need("docker-compose", shutil.which("docker-compose"), "docker-compose")
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    shutil.copy(copy / ".env.example", copy / ".env")
    done = subprocess.run(
        [compose, "-f", str(copy / "compose.yaml"), "config", "-q"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- the topology ------------------------------------------------------------------------------------------


@dataclass
class Replica:
    port: int
    proc: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _unit_command(port: int, config: Path, spool_root: Path) -> tuple[list[str], dict[str, str]]:
    """ExecStart and Environment= of deploy/systemd/tailgate@.service for instance ``port``: the binary is
    this interpreter's tailgate, /etc/tailgate and /var/lib/tailgate are folders of the test."""
    unit = (DEPLOY / "systemd" / "tailgate@.service").read_text(encoding="utf-8").replace("%i", str(port))
    start = re.search(r"^ExecStart=(.+)$", unit, flags=re.MULTILINE)
    assert start is not None
    argv = start.group(1).replace("/etc/tailgate/gateway.yaml", str(config)).split()
    assert argv[0] == "/opt/tailgate/bin/tailgate"
    env = {}
    for m in re.finditer(r"^Environment=(\w+)=(.+)$", unit, flags=re.MULTILINE):
        env[m.group(1)] = m.group(2).replace("/var/lib/tailgate", str(spool_root))
    return [sys.executable, "-m", "tailgate", *argv[1:]], env


def _start_replica(port: int, config: Path, spool_root: Path, env: dict[str, str]) -> Replica:
    argv, unit_env = _unit_command(port, config, spool_root)
    Path(unit_env["TAILGATE_DB"]).parent.mkdir(parents=True, exist_ok=True)  # systemd's StateDirectory=
    proc = subprocess.Popen(argv, env={**env, **unit_env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    replica = Replica(port, proc)
    listening = threading.Event()

    def drain() -> None:  # read stderr to the end: a full pipe would stall the replica
        assert proc.stderr is not None
        for line in proc.stderr:
            replica.log.append(line)
            if "gateway listening on" in line:
                listening.set()
        listening.set()

    replica.reader = threading.Thread(target=drain, daemon=True)
    replica.reader.start()
    listening.wait(120)
    if not any("gateway listening on" in line for line in replica.log):
        raise RuntimeError(f"replica on {port} did not start:\n" + "".join(replica.log))
    return replica


def _drain_log(replica: Replica) -> None:
    if replica.reader is not None:
        replica.reader.join(timeout=10)
    if replica.proc.stderr is not None:
        replica.proc.stderr.close()


def _nginx_conf(tmp: Path, lb_port: int, replica_ports: list[int]) -> Path:
    """deploy/nginx/tailgate-vm.conf (ports templated, the include's path made ours) inside the main
    nginx.conf a Debian host has (events, http, the temp and log paths: here, folders of the test)."""
    shutil.copy(DEPLOY / "nginx" / "tailgate-proxy.inc", tmp / "tailgate-proxy.inc")
    site = (DEPLOY / "nginx" / "tailgate-vm.conf").read_text(encoding="utf-8")
    site = site.replace("listen 8080;", f"listen 127.0.0.1:{lb_port};")
    for shipped, port in zip((8081, 8082, 8083), replica_ports, strict=True):
        site = site.replace(f"127.0.0.1:{shipped} ", f"127.0.0.1:{port} ")
    site = site.replace("/etc/nginx/tailgate-proxy.inc", str(tmp / "tailgate-proxy.inc"))
    (tmp / "tailgate.conf").write_text(site, encoding="utf-8")
    temp = "\n".join(
        f"  {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main = (
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\npid {tmp / 'nginx.pid'};\nerror_log {tmp / 'nginx-error.log'} warn;\n"
        + "events {}\n"
        + f"http {{\n  access_log {tmp / 'nginx-access.log'};\n{temp}\n  include {tmp / 'tailgate.conf'};\n}}\n"
    )
    (tmp / "nginx.conf").write_text(main, encoding="utf-8")
    return tmp / "nginx.conf"


def _wait_port(port: int, proc: subprocess.Popen[Any], what: str, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


@contextlib.contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


async def _traffic(base_url: str, key: str, stop: asyncio.Event, *, streams: bool) -> tuple[int, list[str]]:
    """Requests through nginx, four at a time, until ``stop``; every failure is recorded (no SDK retries)."""
    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)
    done = 0
    failures: list[str] = []

    async def worker(i: int) -> None:
        nonlocal done
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if streams and (i + n) % 2 == 0:
                    stream = await client.chat.completions.create(
                        model="deepseek-v3.2",
                        messages=[{"role": "user", "content": "hi"}],
                        max_tokens=8,
                        stream=True,
                    )
                    chunks = [c async for c in stream]
                    if not chunks:
                        failures.append("an empty stream")
                else:
                    await client.chat.completions.create(
                        model="deepseek-v3.2", messages=[{"role": "user", "content": "hi"}], max_tokens=8
                    )
                done += 1
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

    try:
        await asyncio.gather(*(worker(i) for i in range(4)))
    finally:
        await client.close()
    return done, failures


async def _run_traffic_while(action: Any, base_url: str, key: str, *, streams: bool) -> tuple[int, list[str]]:
    stop = asyncio.Event()
    task = asyncio.create_task(_traffic(base_url, key, stop, streams=streams))
    await asyncio.sleep(1.0)
    await asyncio.to_thread(action)
    await asyncio.sleep(2.0)
    stop.set()
    return await task


def _status(url: str, key: str) -> int:
    body = json.dumps({"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    request = urllib.request.Request(  # noqa: S310 - a loopback http URL we built
        f"{url}/v1/chat/completions",
        data=body.encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the same
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.timeout(300)
def test_the_recipe_runs_process_for_process(tmp_path: Path) -> None:
    """nginx → three replicas (Redis state, PostgreSQL store) → a simulator, Prometheus scraping each: traffic
    flows, a CLI-made key works everywhere within a second, Prometheus sees the three replicas, and a replica
    stopped and another killed under load cost no client request."""
    nginx = _need(
        "nginx", shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None), "nginx"
    )
    prometheus = _need("prometheus", shutil.which("prometheus"), "prometheus")
    _need("redis-server", find_redis_server(), "redis-server")
    _need("initdb", find_bin("initdb") if postgres_available() else None, "postgresql")
    psql = _need("psql", find_bin("psql"), "postgresql")

    pg = PostgresCluster(superuser="postgres")
    redis = RedisServer()
    sim: MockProcess | None = None
    replicas: list[Replica] = []
    try:
        pg.start()
        # The recipe's role and database, made by its own SQL file (the password is unchecked here: trust auth).
        subprocess.run(
            [
                psql,
                "-h",
                "127.0.0.1",
                "-p",
                str(pg.port),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-v",
                f"pw={PG_PASSWORD}",
                "-f",
                str(DEPLOY / "postgres" / "init.sql"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        redis.start()
        sim = MockProcess(["--preset", "instant", "--port", "0"])

        config = tmp_path / "etc" / "gateway.yaml"
        config.parent.mkdir()
        shipped = (DEPLOY / "gateway.yaml").read_text(encoding="utf-8")
        templated = re.sub(r"preset: (lanyun|bailian),", f'base_url: "{sim.url}",', shipped)
        assert templated.count(sim.url) == 2
        config.write_text(templated, encoding="utf-8")
        env = {
            **os.environ,
            "TG_CLIENT_KEY": CLIENT_KEY,
            "TG_ADMIN_KEY": ADMIN_KEY,
            "LANYUN_KEY": "sk-lanyun-deploy-test",
            "BAILIAN_KEY": "sk-bailian-deploy-test",
            "PGPASSWORD": PG_PASSWORD,
            "TG_PG_HOST": "127.0.0.1",
            "TG_PG_PORT": str(pg.port),
            "TG_REDIS_URL": redis.url,
            "TG_LISTEN_HOST": "127.0.0.1",
        }
        env.pop("TAILGATE_DB", None)
        check = subprocess.run(
            [sys.executable, "-m", "tailgate", "config", "check", str(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stderr
        assert f"store: postgresql://tailgate:***@127.0.0.1:{pg.port}/tailgate (0 keys" in check.stdout

        ports = [_free_port() for _ in range(3)]
        replicas = [_start_replica(p, config, tmp_path / "var", env) for p in ports]
        lb_port, prom_port = _free_port(), _free_port()
        nginx_conf = _nginx_conf(tmp_path, lb_port, ports)
        tested = subprocess.run([nginx, "-t", "-c", str(nginx_conf)], capture_output=True, text=True, timeout=60)
        assert tested.returncode == 0, tested.stderr
        prom_yml = (DEPLOY / "systemd" / "prometheus.yml").read_text(encoding="utf-8")
        for shipped_port, port in zip((8081, 8082, 8083), ports, strict=True):
            prom_yml = prom_yml.replace(f"127.0.0.1:{shipped_port}", f"127.0.0.1:{port}")
        (tmp_path / "prometheus.yml").write_text(prom_yml, encoding="utf-8")
        prom_argv = [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ]
        with (
            _process([nginx, "-c", str(nginx_conf)], tmp_path / "nginx.out") as lb,
            _process(prom_argv, tmp_path / "prometheus.out") as prom,
        ):
            _wait_port(lb_port, lb, "nginx")
            _wait_port(prom_port, prom, "prometheus")
            _exercise(tmp_path, env, config, replicas, lb_port, prom_port)
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in replicas:
            try:
                r.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait(timeout=10)
            _drain_log(r)
        if sim is not None:
            sim.stop()
        redis.close()
        pg.remove()


def _exercise(
    tmp_path: Path, env: dict[str, str], config: Path, replicas: list[Replica], lb_port: int, prom_port: int
) -> None:
    lb = f"http://127.0.0.1:{lb_port}/v1"

    # 1. Traffic through nginx, streams and not, with the config's client key: every request answered.
    done, failures = asyncio.run(_run_traffic_while(lambda: None, lb, CLIENT_KEY, streams=True))
    assert failures == []
    assert done >= 20

    # 2. A team key made with the CLI, as docs/deploy.md's day-2 section says: every replica takes it within
    # a second (through the shared store; each replica is asked directly, so none is skipped by nginx).
    made = subprocess.run(
        [sys.executable, "-m", "tailgate", "keys", "create", "--config", str(config), "--id", "team-a", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    created_at = time.monotonic()
    assert made.returncode == 0, made.stderr
    team_key = json.loads(made.stdout)["key"]
    assert "postgresql://tailgate:***@" in made.stderr  # it says which store it used
    waited = {}
    last, period = created_at, 0.0  # the longest gap between two polls: a replica's answer is seen up to this late
    for r in replicas:
        while _status(r.url, team_key) != 200:
            assert time.monotonic() - created_at < 10, f"replica {r.port} never took the new key"
            time.sleep(0.02)
            now = time.monotonic()
            period, last = max(period, now - last), now
        waited[r.port] = time.monotonic() - created_at
    # "Within a second" is the promise; each poll waits on a replica's loop, so a starved machine shows in the
    # period: one for the observation, one for the replica's own lateness (as tests/fleet/test_fleet.py does).
    assert max(waited.values()) < 1.0 + 2 * period, (waited, period)
    assert _status(f"http://127.0.0.1:{lb_port}", team_key) == 200

    # 3. Prometheus's own query API sees every replica's series (the first scrape comes within one interval).
    query = urllib.parse.quote('count(count by (replica) (tailgate_requests_total{job="tailgate"}))')
    deadline = time.monotonic() + 60
    while True:
        result = _get_json(f"http://127.0.0.1:{prom_port}/api/v1/query?query={query}")["data"]["result"]
        if result and result[0]["value"][1] == "3":
            break
        assert time.monotonic() < deadline, f"Prometheus sees {result}"
        time.sleep(0.5)
    up = _get_json(f"http://127.0.0.1:{prom_port}/api/v1/query?query=up")["data"]["result"]
    assert sorted(s["metric"]["instance"] for s in up if s["value"][1] == "1") == sorted(
        f"127.0.0.1:{r.port}" for r in replicas
    )

    # 3b. The dashboard through the load balancer: each refresh may reach another replica; every answer names
    # the replica that gave it and lists all three.
    answered = set()
    for _ in range(6):
        request = urllib.request.Request(
            f"http://127.0.0.1:{lb_port}/dashboard/api/live", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the same
            fleet = json.loads(response.read())["fleet"]
        assert fleet["windows_scope"] == "fleet"
        assert len(fleet["replicas"]) == 3
        answered.add(fleet["replica"])
    assert len(answered) >= 2  # nginx spread the refreshes; each named its own replica

    # 4. One replica stopped (SIGTERM: systemctl stop, an upgrade) under streamed and plain traffic, then
    # another killed (SIGKILL: a crash) under plain traffic: nginx passes every request on, none fails.
    def stop_first() -> None:
        replicas[0].proc.send_signal(signal.SIGTERM)
        replicas[0].proc.wait(timeout=40)

    done, failures = asyncio.run(_run_traffic_while(stop_first, lb, team_key, streams=True))
    assert replicas[0].proc.returncode == 0
    assert failures == []
    assert done >= 20

    def kill_second() -> None:
        replicas[1].proc.send_signal(signal.SIGKILL)
        replicas[1].proc.wait(timeout=10)

    done, failures = asyncio.run(_run_traffic_while(kill_second, lb, team_key, streams=False))
    assert failures == []
    assert done >= 20
    # nginx did meet both: the requests it passed on are in its error log, naming the replicas that were gone.
    nginx_log = (tmp_path / "nginx-error.log").read_text(encoding="utf-8")
    for gone in replicas[:2]:
        assert f"127.0.0.1:{gone.port}" in nginx_log
    assert _status(f"http://127.0.0.1:{lb_port}", team_key) == 200  # the last replica carries the fleet


def _admin_status(lb_port: int, source: str, path: str, key: str, forwarded_for: str | None = None) -> int:
    """GET ``path`` through nginx from client address ``source`` (a loopback address of its own: nginx sees
    distinct clients), with ``key`` as the bearer and, when given, a forged ``X-Forwarded-For``."""
    conn = http.client.HTTPConnection("127.0.0.1", lb_port, timeout=10, source_address=(source, 0))
    headers = {"Authorization": f"Bearer {key}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return int(response.status)
    finally:
        conn.close()


@pytest.mark.timeout(240)
def test_wrong_keys_through_nginx_lock_out_only_their_sender(tmp_path: Path) -> None:
    """Behind the recipe's nginx (deploy/gateway.yaml's server.trusted_proxies), 100 wrong admin keys from one
    client — some with a forged X-Forwarded-For — throttle that client's wrong keys only: the admin key from
    another client and from the guesser itself gets 200 on /admin and the dashboard on every replica."""
    nginx = _need(
        "nginx", shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None), "nginx"
    )
    _need("redis-server", find_redis_server(), "redis-server")
    redis = RedisServer()
    sim: MockProcess | None = None
    replicas: list[Replica] = []
    try:
        redis.start()
        sim = MockProcess(["--preset", "instant", "--port", "0"])
        config = tmp_path / "etc" / "gateway.yaml"
        config.parent.mkdir()
        shipped = (DEPLOY / "gateway.yaml").read_text(encoding="utf-8")
        templated = re.sub(r"preset: (lanyun|bailian),", f'base_url: "{sim.url}",', shipped)
        # The store stays each replica's own SQLite spool here: this test is about the front door, not the ledger.
        templated = re.sub(r"^  url: \"postgresql://.*\n", "", templated, flags=re.MULTILINE)
        assert "postgresql://" not in templated
        config.write_text(templated, encoding="utf-8")
        env = {
            **os.environ,
            "TG_CLIENT_KEY": CLIENT_KEY,
            "TG_ADMIN_KEY": ADMIN_KEY,
            "LANYUN_KEY": "sk-lanyun-deploy-test",
            "BAILIAN_KEY": "sk-bailian-deploy-test",
            "TG_REDIS_URL": redis.url,
            "TG_LISTEN_HOST": "127.0.0.1",
        }
        env.pop("TAILGATE_DB", None)
        env.pop("TG_TRUSTED_PROXIES", None)  # the recipe's default: nginx on this host
        ports = [_free_port() for _ in range(3)]
        replicas = [_start_replica(p, config, tmp_path / "var", env) for p in ports]
        lb_port = _free_port()
        nginx_conf = _nginx_conf(tmp_path, lb_port, ports)
        with _process([nginx, "-c", str(nginx_conf)], tmp_path / "nginx.out") as lb:
            _wait_port(lb_port, lb, "nginx")
            guesser, admin = "127.0.0.2", "127.0.0.3"
            wrong = [
                _admin_status(
                    lb_port, guesser, "/admin/providers", f"guess-{i}", f"127.0.0.{50 + i % 3}" if i % 2 else None
                )
                for i in range(100)
            ]
            assert set(wrong) <= {401, 429}, wrong
            # Each replica answers at most admin_max_failures (10) wrong keys with a 401, then 429s: the guesser is
            # throttled however nginx spread them, and the forged X-Forwarded-For entries did not help it.
            assert wrong.count(401) <= 3 * 10, wrong
            assert _admin_status(lb_port, guesser, "/admin/providers", "guess-again") == 429
            for _ in range(6):  # nginx's round robin: every replica is asked twice
                assert _admin_status(lb_port, admin, "/admin/providers", ADMIN_KEY) == 200
                assert _admin_status(lb_port, admin, "/dashboard/api/leaderboard", ADMIN_KEY) == 200
                assert _admin_status(lb_port, guesser, "/admin/providers", ADMIN_KEY) == 200
            # Another client's first wrong key is its own first failure: a 401, not the guesser's 429.
            assert _admin_status(lb_port, "127.0.0.4", "/admin/providers", "one-typo") == 401
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in replicas:
            try:
                r.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait(timeout=10)
            _drain_log(r)
        if sim is not None:
            sim.stop()
        redis.close()
