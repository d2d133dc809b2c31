"""One rule for tests that need an outside component (redis-server, PostgreSQL, node/npm, chromium, wrk …).

On a developer's machine a missing component skips the test, with the reason. In CI (``CI=true``, what
``.ci/run`` and most CI services set) the same absence FAILS the test: ``.ci/run`` installs every one of
them, so a component that is not there means the install broke, and a run that skipped it would be green
by accident. Every such skip in ``tests/`` goes through :func:`require`.

``TAILGATE_TEST_HIDE=redis-server,wrk`` (names as the ``require_*`` helpers give them) makes a present
component count as missing, to show the rule at work: PATH alone cannot hide every one of them (Debian keeps
redis-server in /usr/bin, which the launcher also looks in, and PostgreSQL in /usr/lib/postgresql).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

_TRUE = {"1", "true", "yes", "on"}


def in_ci() -> bool:
    """True when ``$CI`` says this is a CI run (``true``/``1``/``yes``/``on``, any case)."""
    return os.environ.get("CI", "").strip().lower() in _TRUE


def hidden(name: str) -> bool:
    """True when ``$TAILGATE_TEST_HIDE`` (comma-separated) names the component ``name``."""
    return name in {n.strip() for n in os.environ.get("TAILGATE_TEST_HIDE", "").split(",") if n.strip()}


def require(present: object, what: str, how: str, *, name: str | None = None) -> None:
    """Go on when ``present`` is truthy; otherwise skip the test, or under ``CI=true`` fail it.

    ``what`` names the missing component, ``how`` says how to get it (the package, the command); ``name``
    is the component's short name for ``$TAILGATE_TEST_HIDE``.
    """
    if present and not (name is not None and hidden(name)):
        return
    if in_ci():
        pytest.fail(
            f"CI=true and {what} is missing ({how}): .ci/run installs it, so this is a failure, not a skip",
            pytrace=False,
        )
    pytest.skip(f"{what} is missing ({how})")


def require_program(name: str, how: str) -> str:
    """The path of the program ``name`` on PATH (skips, or fails under ``CI=true``, when there is none)."""
    found = shutil.which(name)
    require(found, f"the program {name!r} (not on PATH)", how, name=name)
    assert found is not None
    return found


def require_file(path: Path, how: str) -> Path:
    """``path`` when it exists (skips, or fails under ``CI=true``, when it does not)."""
    require(path.exists(), str(path), how, name=path.name)
    return path


# -- the components .ci/run installs (one function each, so the hint is written once) ----------------------

CHROMIUM = Path("/usr/bin/chromium")


def require_redis_server() -> str:
    """The redis-server binary (Debian 'redis-server'; tests/state, tests/fleet start their own)."""
    from tailgate.state.server import find_redis_server

    found = find_redis_server()
    require(found, "redis-server", "apt-get install redis-server", name="redis-server")
    assert found is not None
    return found


def require_postgres() -> None:
    """PostgreSQL's initdb/postgres binaries (Debian 'postgresql'; a throw-away cluster per session)."""
    from pg_cluster import postgres_available

    how = "apt-get install postgresql"
    require(postgres_available(), "PostgreSQL (initdb, pg_ctl)", how, name="postgresql")


def require_chromium() -> Path:
    """Debian's /usr/bin/chromium, which playwright drives for the headless render tests."""
    return require_file(CHROMIUM, "apt-get install chromium")


def require_wrk(purpose: str) -> str:
    """The wrk load generator, which ``purpose`` (a benchmark script) drives its load with."""
    return require_program("wrk", f"apt-get install wrk; {purpose}")


def require_agent(agent: str) -> Path:
    """A coding agent's program (``claude``, ``codex``, ``qwen``) from its pinned npm package, which .ci/run
    installs into ``$TAILGATE_AGENTS_DIR/<agent>`` (default ``~/.cache/tailgate/agents``), and node to run it."""
    from agent_sessions import AGENTS, agent_program

    require_program("node", "apt-get install nodejs npm")
    program = agent_program(agent)
    package = AGENTS[agent][0]
    how = f"npm install --prefix {program.parents[2]} {package} (.ci/run does)"
    require(program.exists(), f"the coding agent {agent} ({package})", how, name=agent)
    return program
