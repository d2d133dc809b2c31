"""Real coding agents (Claude Code, Codex CLI, Qwen Code, pinned npm packages) run non-interactively against a
real ``tailgate serve`` over two simulated providers, for the agent tests and ``benchmarks/agents.py``.

Each session runs in a fresh temporary folder that is also its ``HOME`` (no user config is read), with shell and
write tools off, telemetry and updates off, bounded in turns and time. The simulator answers the agent's first
turn with a call to its read-only file tool on a file put in the folder (``engine.tool_arguments``) and the
tool's result with text (a tool loop ends), so a session is one tool round trip and a final answer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sim_truth import truth_sync

AGENTS: dict[str, tuple[str, str]] = {
    "claude": ("@anthropic-ai/claude-code@2.1.337", "claude"),
    "codex": ("@openai/codex@0.171.0", "codex"),
    "qwen": ("@qwen-code/qwen-code@0.24.4", "qwen"),
}
"""Agent → (pinned npm package, its program). .ci/run installs each into ``agents_dir() / name``."""
ALIAS = "coder"
MARKER = "The tailgate marker is 7f3a-blue-heron."
"""What the file the agent reads says: seen in a tool result, it proves the agent ran its tool."""
CLIENT_KEY = "tg-agents-test-key"


def agents_dir() -> Path:
    """Where the agents are installed: ``$TAILGATE_AGENTS_DIR``, default ``~/.cache/tailgate/agents``."""
    return Path(os.environ.get("TAILGATE_AGENTS_DIR", Path.home() / ".cache" / "tailgate" / "agents"))


def agent_program(agent: str) -> Path:
    """The agent's program inside its install folder (it may not exist)."""
    return agents_dir() / agent / "node_modules" / ".bin" / AGENTS[agent][1]


class _Proc:
    """A ``python -m tailgate ...`` subprocess whose stderr is read to the end on a thread (a chatty process
    never blocks on a full pipe); ``wait_for`` returns the first match of a pattern in its log."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tailgate", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        self.log: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.log.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 30) -> list[re.Match[str]]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [m for line in self.log if (m := rx.search(line))]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise RuntimeError(f"no {pattern!r} in the log of {self.proc.args!r}:\n" + "".join(self.log))
                self._cond.wait(min(left, 0.5))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        if self.proc.stderr is not None and not self._reader.is_alive():
            self.proc.stderr.close()


@dataclass
class Stack:
    """Two simulated providers (``sa`` also speaks Anthropic's API) and a gateway with one alias over them.

    ``kind``: ``passthrough`` (Anthropic requests go to ``sa``'s native endpoint: one route), ``translated`` (one
    route to ``sb``, translated), ``split`` (both providers 50/50: the session must stick to one)."""

    root: Path
    kind: str = "split"
    upstream_keys: tuple[str, ...] = ("sk-up-1", "sk-up-2", "sk-up-3")
    sims: dict[str, str] = field(default_factory=dict)
    url: str = ""
    _procs: list[_Proc] = field(default_factory=list)

    def start(self, file_path: Path) -> Stack:
        tools = {
            "read_file": {"file_path": str(file_path)},  # Qwen Code
            "Read": {"file_path": str(file_path)},  # Claude Code
            "exec_command": {"cmd": f"cat {file_path}"},  # Codex CLI: a read in its read-only sandbox
        }
        engine = {
            "pre_median_s": 0.0,
            "step_ms": 1.0,
            "jitter": 0.0,
            "default_output_tokens": 24,
            "tool_arguments": tools,
            "max_tokens_cap": True,
            "anthropic": True,
        }
        sim_cfg = {
            "control_port": 0,
            "providers": {
                name: {
                    "preset": "instant",
                    "api_keys": list(self.upstream_keys),
                    "strict_fields": False,
                    "engine": engine,
                }
                for name in ("sa", "sb")
            },
        }
        (self.root / "sim.yaml").write_text(yaml.safe_dump(sim_cfg))
        mock = _Proc("mock", "--config", str(self.root / "sim.yaml"))
        self._procs.append(mock)
        for m in mock.wait_for(r"provider (\S+) \(.*\) listening on (http://\S+)", count=2):
            self.sims[m.group(1)] = m.group(2)
        providers: dict[str, Any] = {
            "pa": {"base_url": self.sims["sa"], "api_keys": list(self.upstream_keys)},
            "pb": {"base_url": self.sims["sb"], "api_keys": list(self.upstream_keys)},
        }
        if self.kind != "translated":
            providers["pa"]["anthropic_base_url"] = self.sims["sa"].removesuffix("/v1")
        routes = {
            "passthrough": [{"provider": "pa", "model": "m"}],
            "translated": [{"provider": "pb", "model": "m"}],
            "split": [{"provider": "pa", "model": "m", "weight": 50}, {"provider": "pb", "model": "m", "weight": 50}],
        }[self.kind]
        gw_cfg = {
            "providers": providers,
            "models": {ALIAS: {"routes": routes}},
            "keys": [{"id": "agents", "key": CLIENT_KEY}],
            "ledger": {"path": str(self.root / "ledger.db"), "flush_interval": "1s"},
        }
        (self.root / "gateway.yaml").write_text(yaml.safe_dump(gw_cfg))
        serve = _Proc("serve", "--config", str(self.root / "gateway.yaml"), "--port", "0")
        self._procs.append(serve)
        self.url = serve.wait_for(r"gateway listening on (http://\S+)")[0].group(1)
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            proc.stop()

    def truth(self) -> list[dict[str, Any]]:
        """Every simulated provider's truth rows (what it served, as it counted it)."""
        rows: list[dict[str, Any]] = []
        for name, url in self.sims.items():
            rows += [{**row, "sim": name} for row in truth_sync(url, limit=100000)]
        return rows


@dataclass
class Session:
    agent: str
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def saw_tool_result(self) -> bool:
        """The file's text came back to the agent in a tool result (it ran its tool)."""
        return MARKER in self.stdout or MARKER.replace(" ", "\\u0020") in self.stdout

    def final_text(self) -> str | None:
        """The session's final answer, or None when it ended in an error."""
        if self.rc != 0:
            return None
        if self.agent == "claude":  # stream-json: one event a line, the result last
            out = json.loads(self.stdout.strip().splitlines()[-1])
            return None if out.get("is_error") or out.get("type") != "result" else out.get("result")
        if self.agent == "qwen":
            events = json.loads(self.stdout)
            result = next((e for e in reversed(events) if e.get("type") == "result"), None)
            return None if result is None or result.get("is_error") else result.get("result")
        # codex exec --json: JSON lines; the last agent message
        text = None
        for line in self.stdout.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            item = ev.get("item") or {}
            if ev.get("type") == "item.completed" and item.get("type") in ("agent_message", "assistant_message"):
                text = item.get("text")
        return text


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TERM", "SYSTEMROOT") if k in os.environ}
    return {**keep, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "CI": "1", **extra}


def run_session(
    agent: str, stack: Stack, work: Path, timeout: float = 60, prompt: str = "Read notes.txt and tell me what it says."
) -> Session:
    """One non-interactive session of ``agent`` in ``work`` (also its HOME) against the stack's gateway."""
    program = str(agent_program(agent))
    if agent == "claude":
        env = _env(
            work,
            {
                "ANTHROPIC_BASE_URL": stack.url.removesuffix("/v1"),
                "ANTHROPIC_AUTH_TOKEN": CLIENT_KEY,
                "ANTHROPIC_MODEL": ALIAS,
                "ANTHROPIC_SMALL_FAST_MODEL": ALIAS,
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        args = [program, "-p", prompt, "--output-format", "stream-json", "--verbose", "--max-turns", "4"]
        args += ["--allowedTools", "Read"]
        args += ["--disallowedTools", "Bash,Edit,Write,MultiEdit,NotebookEdit,WebFetch,WebSearch"]
    elif agent == "qwen":
        env = _env(
            work,
            {"OPENAI_BASE_URL": stack.url, "OPENAI_API_KEY": CLIENT_KEY, "OPENAI_MODEL": ALIAS},
        )
        settings = {
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        (work / ".qwen").mkdir(exist_ok=True)
        (work / ".qwen" / "settings.json").write_text(json.dumps(settings))
        args = [program, "-p", prompt, "--auth-type", "openai", "--core-tools", "read_file"]
        args += ["--max-session-turns", "4", "--output-format", "json", "--approval-mode", "plan"]
    else:
        codex_home = work / ".codex"
        codex_home.mkdir(exist_ok=True)
        (codex_home / "config.toml").write_text(
            f'model = "{ALIAS}"\nmodel_provider = "tailgate"\n'
            "[analytics]\nenabled = false\n"
            "[model_providers.tailgate]\n"
            f'name = "tailgate"\nbase_url = "{stack.url}"\nenv_key = "TAILGATE_KEY"\nwire_api = "responses"\n'
        )
        env = _env(work, {"CODEX_HOME": str(codex_home), "TAILGATE_KEY": CLIENT_KEY})
        args = [program, "exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only", prompt]
    t0 = time.monotonic()
    proc = subprocess.run(
        args, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Session(agent, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0)


def workspace(base: Path | None = None) -> Path:
    """A fresh folder holding ``notes.txt`` (the file the agent reads)."""
    work = Path(tempfile.mkdtemp(prefix="agent-", dir=base))
    (work / "notes.txt").write_text(MARKER + "\n")
    return work


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
