"""Running the gateway: bind, serve, and stop without losing a request or a ledger row.

SIGTERM / SIGINT: stop accepting new connections, let in-flight requests (streams included) finish for
up to ``drain_timeout`` seconds, then close upstream pools and flush the ledger.
SIGHUP re-reads the config file (validated first; a bad file is rejected and logged, the running config
kept; docs/fleet.md), in every worker.
With ``workers > 1``, extra worker processes share the port (SO_REUSEPORT); each has its own provider
state, metrics and ledger writer (the SQLite file is shared, WAL mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from tailgate._runtime import bounded_step, exit_if_not_stopped_within, run, setup_logging
from tailgate.config.resolve import load_resolved
from tailgate.gateway.app import CLOSE_STEP_S, Gateway
from tailgate.gateway.http import listener as http_site
from tailgate.gateway.http.listener import runner_kwargs
from tailgate.gateway.process.workers import worker_gone

log = logging.getLogger("tailgate.gateway")

STOP_GRACE_S = 10.0
"""A ``tailgate serve`` process exits at the latest this long after its drain (``--drain-timeout``) ends: the
closing steps take milliseconds while the stores answer, and each is bounded (``Gateway.close``); past it the
process logs it and exits with status 1 (docs/gateway.md, "Stopping")."""


class ListenError(OSError):
    """The gateway cannot bind its address (in use, not ours, not permitted): said in one line, no traceback."""


async def _start_site(site: web.BaseSite, what: str) -> None:
    try:
        await site.start()
    except OSError as exc:
        raise ListenError(f"cannot listen on {what}: {exc.strerror or exc}") from None


async def serve_gateway(
    stop: asyncio.Event,
    config_path: Path,
    *,
    host: str | None = None,
    port: int | None = None,
    reuse_port: bool = False,
    drain_timeout: float = 30.0,
    ledger_path: Path | None = None,
    ready: asyncio.Event | None = None,
    on_hup: Callable[[], None] | None = None,
    exit_within: float | None = None,
) -> bool:
    """Serve until ``stop`` is set, then drain and close (each step bounded, ``Gateway.close``).

    ``exit_within``: this process exits at the latest ``drain_timeout + exit_within`` seconds after ``stop`` is
    set, whatever still hangs (for the ``tailgate serve`` process; never for a gateway embedded in a test).
    True when every closing step finished within its bound."""
    config, providers = load_resolved(config_path)
    gateway = Gateway(config, providers, ledger_path=ledger_path, config_path=config_path)
    host = host or config.listen.host
    port = config.listen.port if port is None else port
    gateway.check_bind(host)
    try:
        await gateway.start()
    except BaseException:  # a newer schema in the store, say: release what did start, then say why
        with contextlib.suppress(Exception):
            await gateway.close()
        raise
    if gateway.keys.open:  # after start: the store's runtime keys are loaded by now (they close the gateway too)
        log.warning("no gateway keys configured: any bearer is accepted (listening on loopback %s only)", host)
    _on_sighup(gateway, on_hup)  # before "listening": a SIGHUP from then on reloads, never kills
    server = config.server
    runner = web.AppRunner(
        gateway.app(),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=drain_timeout,
        **runner_kwargs(server),
    )
    metrics_runner: web.AppRunner | None = None
    try:
        await runner.setup()
        site = http_site.site(runner, host, port, server, reuse_port=reuse_port or None)
        await _start_site(site, f"{host}:{port}")
        bound = site.port
        if config.metrics.listen is not None:  # /metrics on its own bind (docs/reliability.md)
            metrics_runner = web.AppRunner(gateway.metrics_app(), access_log=None, **runner_kwargs(server))
            await metrics_runner.setup()
            m = config.metrics.listen
            msite = http_site.site(metrics_runner, m.host, m.port, server, reuse_port=reuse_port or None)
            await _start_site(msite, f"{m.host}:{m.port} (metrics.listen)")
            log.info("metrics on http://%s:%d/metrics", m.host, msite.port)
        log.info(
            "gateway listening on http://%s:%d/v1 (%d providers, %d aliases)",
            host,
            bound,
            len(gateway.providers),
            len(gateway.aliases),
        )
        if ready is not None:
            ready.set()
        await stop.wait()
        if exit_within is not None:  # the CLI's process: it exits by then whatever hangs (docs/gateway.md)
            exit_if_not_stopped_within(drain_timeout + exit_within, log)
        log.info("stopping: no new connections; waiting up to %.0fs for requests in flight", drain_timeout)
    finally:
        clean = True
        if metrics_runner is not None:
            clean = await bounded_step("the metrics listener (cleanup)", metrics_runner.cleanup(), CLOSE_STEP_S, log)
        # aiohttp waits up to drain_timeout for the requests in flight, then cancels them: a little more for that
        cleanup = runner.cleanup()
        clean = await bounded_step("requests in flight (runner.cleanup)", cleanup, drain_timeout + 2.0, log) and clean
        clean = await gateway.close() and clean
        if gateway.ledger is not None:
            log.info("ledger flushed: %d rows written, %d dropped", gateway.ledger.written, gateway.ledger.dropped)
    return clean


def _on_sighup(gateway: Gateway, also: Callable[[], None] | None) -> None:
    """SIGHUP re-reads the config file (gateway/admin/reload.py); ``also`` passes it on to the worker processes."""
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        return
    tasks: set[asyncio.Task[object]] = set()

    def hup() -> None:
        log.info("SIGHUP: reloading the config")
        task: asyncio.Task[object] = asyncio.ensure_future(gateway.reloader.reload())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if also is not None:
            also()

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hup)


def _worker(config_path: Path, host: str | None, port: int | None, drain_timeout: float, verbose: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent turns Ctrl-C into SIGTERM for us
    setup_logging(verbose)
    clean = run(
        lambda stop: serve_gateway(
            stop,
            config_path,
            host=host,
            port=port,
            reuse_port=True,
            drain_timeout=drain_timeout,
            exit_within=STOP_GRACE_S,
        )
    )
    if not clean:
        _exit_now()


def _exit_now() -> None:
    """A closing step overran (logged by name): a thread may still be blocked in its store call, and the
    interpreter would wait for it at exit. Leave now, with status 1."""
    log.warning("stopping: exiting with status 1 without waiting for the step(s) named above")
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(1)


def serve_forever(
    config_path: Path, *, host: str | None, port: int | None, workers: int = 1, drain_timeout: float = 30.0
) -> None:
    """The ``tailgate serve`` command: this process serves, plus ``workers - 1`` children on the same port."""
    children: list[multiprocessing.context.SpawnProcess] = []
    if workers > 1:
        ctx = multiprocessing.get_context("spawn")
        for _ in range(workers - 1):
            verbose = logging.getLogger().isEnabledFor(logging.DEBUG)
            child = ctx.Process(target=_worker, args=(config_path, host, port, drain_timeout, verbose), daemon=False)
            child.start()
            children.append(child)

    def forward_hup() -> None:
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, signal.SIGHUP)

    clean = False
    try:
        clean = run(
            lambda stop: serve_gateway(
                stop,
                config_path,
                host=host,
                port=port,
                reuse_port=workers > 1,
                drain_timeout=drain_timeout,
                on_hup=forward_hup,
                # with workers, they are told to stop once this process has (below): their bound comes on top
                exit_within=STOP_GRACE_S if not children else drain_timeout + 2 * STOP_GRACE_S,
            )
        )
    finally:
        for child in children:
            if child.pid is not None and child.is_alive():
                child.terminate()  # SIGTERM: the child drains and flushes like we did
        for child in children:
            child.join(timeout=drain_timeout + STOP_GRACE_S)
            if child.pid is not None:
                worker_gone(child.pid)
    if not clean:
        _exit_now()
