"""Shared fixtures: real simulated providers on ephemeral loopback ports, in-loop or in a thread."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from _require import require_postgres, require_redis_server
from pg_cluster import PostgresCluster, running_cluster
from tailgate.config.schema import StateConfig
from tailgate.ledger.store import StoreConn, open_store
from tailgate.sim.faults import Faults
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider
from tailgate.state import LocalState, SharedState
from tailgate.state.redis import RedisState
from tailgate.state.server import RedisServer

T = TypeVar("T")
SimFactory = Callable[..., Awaitable[SimProvider]]


@pytest.fixture(scope="session", autouse=True)
def _own_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default store (``$XDG_DATA_HOME/tailgate/tailgate.db``) of every command a test runs without ``--db`` or
    ``ledger.path`` is this session's own, never the user's: a file there written by another tailgate (a newer
    schema, say) failed `serve` tests that had nothing to do with it. Tests of the default path set their own."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data-home")))
    mp.delenv("TAILGATE_DB", raising=False)
    yield
    mp.undo()


# -- the parallel schedule (CONTRIBUTING.md, "The CI budget") ------------------------------------------------

TIMING_GROUP = "timing"


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker starts with ``COLUMNS=80`` and ``LINES=24`` in its environment, which a serial run never has:
    the CLI's piped output (tables, error lines) would wrap at 80 columns in a worker and not in a serial run. The
    tests that are about ``COLUMNS`` set it themselves, so every worker gets the environment a serial run has."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (what ``.ci/run`` runs), every test that judges wall time or CPU (the
    ``bench`` smokes and the ``timing`` tests) joins one xdist group: they run one after another on one worker, never
    beside each other, and the group is scheduled first (the longest unit of work, so it never becomes the tail).
    Everything else is spread test by test. Without xdist the marks are inert."""
    for item in items:
        if item.get_closest_marker("bench") or item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))
    # The long tests start first, so none of them is the tail of a parallel run: the `slow` ones, then the
    # end-to-end files at the top of tests/ (packaging, the deploy recipe, the demo, the docs' command flows).
    # A stable sort: the rest keep pytest's order.
    top = Path(__file__).parent
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, item.path.parent != top))


@pytest.fixture(autouse=True)
def _untraced_when_timing(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that judges time or CPU runs untraced when the suite is measured for coverage (CI measures it in the
    same run as the verdict): line tracing slows Python two- to three-fold, which such a test must not pass or fail
    on, and so do the child processes it starts. Its lines are covered by the rest of the suite; the other tests
    stay traced."""
    if not (request.node.get_closest_marker("bench") or request.node.get_closest_marker("timing")):
        yield
        return
    try:
        from coverage import Coverage
    except ImportError:  # pragma: no cover - coverage is a dev dependency
        yield
        return
    cov = Coverage.current()
    if cov is None:
        yield
        return
    cov.stop()
    # coverage's `patch = subprocess` measures child Pythons through this variable: the servers such a test starts
    # run untraced too.
    child_config = os.environ.pop("COVERAGE_PROCESS_CONFIG", None)
    try:
        yield
    finally:
        if child_config is not None:
            os.environ["COVERAGE_PROCESS_CONFIG"] = child_config
        cov.start()


def make_spec(
    name: str = "instant",
    *,
    faults: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    **fields: Any,
) -> ProviderSpec:
    """A ProviderSpec for a preset on port 0, with optional fault and engine overrides."""
    params = preset(name)
    if engine:
        params = replace(params, **engine)
    spec = ProviderSpec(name=name, params=params, preset=name, port=0)
    if faults:
        spec = replace(spec, faults=Faults.model_validate(faults))
    return replace(spec, **fields)


@pytest.fixture
async def sim() -> AsyncIterator[SimFactory]:
    """Start simulated providers inside the test's event loop; all are stopped afterwards."""
    started: list[SimProvider] = []

    async def factory(name: str = "instant", **kwargs: Any) -> SimProvider:
        provider = SimProvider(make_spec(name, **kwargs))
        await provider.start()
        started.append(provider)
        return provider

    yield factory
    for provider in started:
        await provider.stop()


class ThreadedSim:
    """A simulated provider on its own event loop in a background thread (for blocking clients)."""

    def __init__(self, spec: ProviderSpec) -> None:
        self.loop = asyncio.new_event_loop()
        self.provider = SimProvider(spec)
        self._thread = threading.Thread(target=self.loop.run_forever, name="sim", daemon=True)
        self._thread.start()
        self.call(self.provider.start())

    def call(self, coro: Awaitable[T]) -> T:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout=10)

    def set_faults(self, **faults: Any) -> None:
        async def apply() -> None:
            self.provider.set_faults(Faults.model_validate(faults))

        self.call(apply())

    @property
    def url(self) -> str:
        return self.provider.url

    def close(self) -> None:
        self.call(self.provider.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def threaded_sim() -> Iterator[Callable[..., ThreadedSim]]:
    """Factory for :class:`ThreadedSim`; every instance is closed after the test."""
    made: list[ThreadedSim] = []

    def factory(name: str = "instant", **kwargs: Any) -> ThreadedSim:
        ts = ThreadedSim(make_spec(name, **kwargs))
        made.append(ts)
        return ts

    yield factory
    for ts in made:
        ts.close()


@pytest.fixture
async def oai() -> AsyncIterator[Callable[..., Any]]:
    """Factory for official ``openai.AsyncOpenAI`` clients (no retries); all are closed afterwards."""
    from openai import AsyncOpenAI

    made: list[AsyncOpenAI] = []

    def factory(url: str, key: str = "sk-test", **kwargs: Any) -> AsyncOpenAI:
        client = AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=kwargs.pop("timeout", 10), **kwargs)
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.close()


class MockProcess:
    """``tailgate mock`` running as a real subprocess (its own interpreter and event loop)."""

    def __init__(self, args: list[str]) -> None:
        import re
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tailgate", "mock", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.urls: dict[str, str] = {}
        self.log: list[str] = []
        assert self.proc.stderr is not None
        pattern = re.compile(r"provider (\S+) \(.*\) listening on (http://\S+)")
        for line in self.proc.stderr:
            self.log.append(line)
            if match := pattern.search(line):
                self.urls[match.group(1)] = match.group(2)
            if "control API" in line or (self.urls and "--config" not in args):
                break
        if not self.urls:
            raise RuntimeError("tailgate mock did not start:\n" + "".join(self.log))

    @property
    def url(self) -> str:
        return next(iter(self.urls.values()))

    def stop(self) -> int:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=10)
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.log.extend(self.proc.stderr.readlines())
            self.proc.stderr.close()
        return code


@pytest.fixture
def mock_process() -> Iterator[Callable[..., MockProcess]]:
    """Factory for ``tailgate mock`` subprocesses; each is stopped with SIGINT afterwards."""
    made: list[MockProcess] = []

    def factory(*args: str) -> MockProcess:
        mp = MockProcess(list(args))
        made.append(mp)
        return mp

    yield factory
    for mp in made:
        mp.stop()


class GatewayHandle:
    """An in-process gateway on an ephemeral loopback port."""

    def __init__(self, gateway: Any, runner: Any, port: int) -> None:
        self.gateway = gateway
        self.runner = runner
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.gateway.close()


@pytest.fixture
async def gateway(tmp_path: Any) -> AsyncIterator[Callable[..., Awaitable[GatewayHandle]]]:
    """Factory: start a gateway from a config dict (validated like a file) with its ledger in tmp_path."""
    from aiohttp import web

    from tailgate.config.loader import validate_data
    from tailgate.config.resolve import resolve_providers
    from tailgate.config.schema import GatewayConfig
    from tailgate.gateway.app import Gateway
    from tailgate.gateway.http.listener import runner_kwargs
    from tailgate.gateway.http.listener import site as limits_site

    started: list[GatewayHandle] = []

    async def factory(config: dict[str, Any], ledger: bool = True) -> GatewayHandle:
        data = {"ledger": {"enabled": ledger, "path": str(tmp_path / f"ledger{len(started)}.db")}, **config}
        cfg = validate_data(data, GatewayConfig, "test-config")
        gw = Gateway(cfg, resolve_providers(cfg))
        await gw.start()
        kwargs = runner_kwargs(cfg.server)
        runner = web.AppRunner(gw.app(), handler_cancellation=True, access_log=None, shutdown_timeout=10, **kwargs)
        await runner.setup()
        site = limits_site(runner, "127.0.0.1", 0, cfg.server)  # the connection cap and header limits of serve
        await site.start()
        port = site.port
        handle = GatewayHandle(gw, runner, port)
        started.append(handle)
        return handle

    yield factory
    for handle in started:
        await handle.stop()


def two_provider_config(primary_url: str, secondary_url: str, **extra: Any) -> dict[str, Any]:
    """The 80/20 shape of DESIGN.md against two simulated providers (upstream ids differ from the alias)."""
    config: dict[str, Any] = {
        "providers": {
            "primary": {"base_url": primary_url, "api_keys": ["sk-primary-canary-0123456789"]},
            "secondary": {"base_url": secondary_url, "api_keys": ["sk-secondary-0123456789"]},
        },
        "models": {
            "deepseek-v3.2": {
                "routes": [
                    {"provider": "primary", "model": "up-primary", "weight": 80},
                    {"provider": "secondary", "model": "up-secondary", "weight": 20, "classes": ["batch"]},
                ]
            }
        },
    }
    config.update(extra)
    return config


# -- the store on PostgreSQL (tests/ledger, tests/gateway): a real cluster per session ----------------------

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    require_postgres()
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def own_pg_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster of this test alone, for outage drills that stop and start it: a failure between the
    two leaves the session's shared ``pg_cluster`` running for every other test."""
    require_postgres()
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> str:
    """A fresh, empty database on the session's cluster."""
    return pg_cluster.fresh_database(f"t{next(_names)}")


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location for each backend: a SQLite path, or a fresh PostgreSQL database URL."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    cluster: PostgresCluster = request.getfixturevalue("pg_cluster")
    return cluster.fresh_database(f"t{next(_names)}")


@pytest.fixture
def store(store_target: str) -> Iterator[StoreConn]:
    conn = open_store(store_target)
    try:
        yield conn
    finally:
        conn.close()


# -- fleet state (tests/state, tests/fleet): a real redis-server per session -------------------------------

StateFactory = Callable[..., Awaitable[SharedState]]


async def eventually(check: Callable[[], bool], within_s: float = 1.0) -> float:
    """Seconds until ``check()`` held (polled every 10 ms); fails the test after ``within_s``."""
    import time

    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > within_s:
            pytest.fail(f"not within {within_s}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session (tests isolate themselves by namespace)."""
    require_redis_server()
    with RedisServer() as server:
        yield server


def redis_config(url: str, namespace: str, **fields: object) -> StateConfig:
    # A generous call budget: the contract tests assert decisions, not speed, on a shared 2-core machine.
    return StateConfig.model_validate(
        {"backend": "redis", "url": url, "namespace": namespace, "timeout": 0.5, "sync_interval": 0.05} | fields
    )


async def _connected(s: RedisState) -> None:
    """Wait until a started replica has reached Redis. Its start gives the first sync 1 s; on a loaded machine (four
    workers, two burners, each test's redis-server) that ran out, the replica began on its local fallback and the
    test's counts were the fallback's (a burst test read 107 of 1,200 in Redis). The tests using this fixture are
    about Redis's decisions: they begin once the sync loop (retrying every 0.1 s) has reached it."""
    await eventually(lambda: s.connected, within_s=20.0)


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[StateFactory]:
    """Factory of started RedisState replicas sharing one fresh namespace; all closed afterwards."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    made: list[SharedState] = []

    async def factory(replica: str | None = None, **fields: object) -> SharedState:
        s = RedisState(redis_config(redis_server.url, namespace, **fields), replica=replica or f"r{len(made)}")
        await s.start()
        made.append(s)
        await _connected(s)
        return s

    yield factory
    for s in made:
        await s.close()


@pytest.fixture(params=["local", "redis"])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[SharedState]:
    """The contract suite's subject: each backend in turn."""
    if request.param == "local":
        s: SharedState = LocalState("solo")
        await s.start()
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        s = RedisState(redis_config(server.url, f"t{uuid.uuid4().hex[:12]}"), replica="solo")
        await s.start()
        await _connected(s)
    yield s
    await s.close()


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """The redis-server binary, for tests that start their own (a skip, or a failure under CI=true, without it)."""
    return require_redis_server()
