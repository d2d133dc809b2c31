"""The official Node SDK (npm ``openai``, on Debian's nodejs) against the simulator and through the gateway:
chat stream and not, thinking on and off, tool calls, the Responses API, errors to the right classes.

The SDK is installed once into a cache folder (``$TAILGATE_NODE_SDK_DIR``, default
``~/.cache/tailgate/node-openai``) with npm; without node/npm, or when the registry cannot be reached,
the tests skip with the reason, and fail under ``CI=true`` (tests/_require.py: .ci/run installs node and npm,
so a failed install is a broken CI run, not a skip).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from _require import require, require_program
from conftest import GatewayHandle, SimFactory

GwFactory = Callable[..., Awaitable[GatewayHandle]]
SDK_SPEC = "openai@7"
SCRIPT = Path(__file__).with_name("sdk_check.mjs")
ALL_CHECKS = {"chat", "chat_stream", "thinking_on", "thinking_off", "tools", "responses", "error_404", "error_400"}
ALL_CHECKS |= {"error_429", "error_5xx"}


@pytest.fixture(scope="module")
def node_sdk() -> Path:
    """A folder whose node_modules holds the openai SDK (installed on first use)."""
    require_program("node", "apt-get install nodejs npm")
    npm = require_program("npm", "apt-get install nodejs npm")
    where = Path(os.environ.get("TAILGATE_NODE_SDK_DIR", Path.home() / ".cache" / "tailgate" / "node-openai"))
    if not (where / "node_modules" / "openai" / "package.json").exists():
        where.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                [npm, "install", "--prefix", str(where), "--no-audit", "--no-fund", "--loglevel=error", SDK_SPEC],
                check=True,
                capture_output=True,
                timeout=240,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            stderr = getattr(exc, "stderr", b"") or b""
            detail = f"{exc}: {stderr.decode(errors='replace')[-1500:]}"
            require(False, f"the npm package {SDK_SPEC} (npm install failed: {detail})", "a reachable npm registry")
    shutil.copy(SCRIPT, where / SCRIPT.name)  # node resolves `openai` from the script's own folder
    return where


async def _run(sdk: Path, base: str, model: str, sim_root: str, mode: str) -> set[str]:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(sdk / SCRIPT.name),
        base,
        model,
        sim_root,
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    passed: list[str] = json.loads(out.decode().strip().splitlines()[-1])["passed"]
    return set(passed)


@pytest.mark.timeout(300)  # the first run installs the SDK with npm (module fixture, inside this budget)
async def test_node_sdk_against_the_simulator(node_sdk: Path, sim: SimFactory) -> None:
    """Every check passes against a vLLM-shaped simulator (with a listed model and an API key)."""
    p = await sim("vllm", time_scale=0.01, models=("m",), api_keys=("sk-good",))
    assert await _run(node_sdk, p.url, "m", p.root_url, "sim") == ALL_CHECKS | {"error_401"}


@pytest.mark.timeout(300)
async def test_node_sdk_through_the_gateway(node_sdk: Path, sim: SimFactory, gateway: GwFactory) -> None:
    """The same checks through the gateway, plus the SSE error event after output began (APIError)."""
    p = await sim("vllm", time_scale=0.01, models=("up",))
    config = {
        "providers": {"p": {"base_url": p.url, "api_keys": ["sk-p-0123456789"]}},
        "models": {"m": {"routes": [{"provider": "p", "model": "up"}]}},
    }
    gw = await gateway(config)
    assert await _run(node_sdk, gw.url, "m", p.root_url, "gateway") == ALL_CHECKS | {"error_mid_stream"}
