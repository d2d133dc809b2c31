"""Answer quality in a scenario: tool-call requests checked where the client gets them, and the monitor beside.

- ``load.tool_calls`` (a share): that share of the load's requests declares one tool (:data:`LOAD_TOOL`) with
  ``tool_choice: required``; the client checks each answer's tool call with the gateway's own signal functions
  (``tailgate.quality.signals.tool_call_problems``: arguments valid JSON, a declared tool, matching its schema).
  An answer with no tool call, or one that shows any tool signal, is **broken**. That is what reached the client,
  whatever any provider served and the gateway did.
- ``monitor:`` runs ``tailgate monitor``'s probe rounds (``tailgate.monitor.runner.Monitor``, the same workloads,
  the canary set among them) against the simulators directly, every ``interval`` with its jitter, into the run's
  store — the gateway's ledger database, as ``tailgate monitor --db`` and ``tailgate serve`` share one in a
  deployment. The round's samples are kept for the report (canaries graded per provider and phase).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tailgate._runtime import stop_task
from tailgate.bench.workload import RequestBody, RequestSpec
from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.samples import Sample, SampleStore
from tailgate.monitor.runner import Monitor, targets_from_config
from tailgate.monitor.schedule import Schedule
from tailgate.quality.signals import assemble_chat_stream, tool_call_problems

__all__ = ["LOAD_TOOL", "MonitorBeside", "ToolCallMix", "tool_call_ok"]

log = logging.getLogger("tailgate.scenario")

LOAD_TOOL: dict[str, Any] = {  # reason: a tool declaration as sent: free-form JSON (a JSON Schema inside)
    "type": "function",
    "function": {
        "name": "get_forecast",
        "description": "The weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days", "units"],
            "additionalProperties": False,
        },
    },
}
"""The tool the load's tool-call requests declare (``load.tool_calls``)."""


def _objects(frames: list[bytes]) -> list[dict[str, Any]]:  # reason: a provider's answer frames, any shape
    out: list[dict[str, Any]] = []  # reason: as above
    for frame in frames:
        lines = [frame] if frame.lstrip().startswith(b"{") else frame.split(b"\n")
        for line in lines:
            data = line[5:].strip() if line.startswith(b"data:") else line.strip()
            if not data.startswith(b"{"):
                continue
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def tool_call_ok(body: RequestBody, frames: list[bytes]) -> bool:
    """Whether an answer to a tool-call request (raw SSE frames, or one whole body) has a tool call that shows no
    tool signal: its arguments are a JSON object matching the declared tool's schema, and the tool was declared."""
    objects = _objects(frames)
    if not objects:
        return False
    whole = objects[0] if len(objects) == 1 and objects[0].get("object") == "chat.completion" else None
    answer = whole if whole is not None else assemble_chat_stream(objects)
    observations = tool_call_problems(body, answer)
    return bool(observations) and not any(o.hit for o in observations)


class ToolCallMix:
    """Turns ``share`` of the requests into tool-call requests (seeded, independent of the class draw)."""

    def __init__(self, share: float, seed: int) -> None:
        self.share = share
        self._rng = random.Random(seed + 2)

    def apply(self, spec: RequestSpec) -> RequestSpec:
        if self.share <= 0 or self._rng.random() >= self.share:
            return spec
        body: RequestBody = {**spec.body, "tools": [LOAD_TOOL], "tool_choice": "required"}
        messages = body.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
            last = dict(messages[-1])
            if isinstance(last.get("content"), str):
                last["content"] = "Look up the forecast for the city these notes name. " + last["content"]
            body["messages"] = [*messages[:-1], last]
        return replace(spec, body=body, check=tool_call_ok)


class MonitorBeside:
    """``tailgate monitor``'s rounds on a schedule (first round at once) until :meth:`close`; samples kept."""

    def __init__(self, monitor: Monitor, store: SampleStore, schedule: Schedule) -> None:
        self.monitor = monitor
        self.store = store
        self.schedule = schedule
        self.samples: list[Sample] = []
        self.rounds = 0
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._loop())

    @classmethod
    async def start(
        cls,
        config: GatewayConfig,
        providers: Mapping[str, ResolvedProvider],
        db: Path,
        *,
        interval_s: float,
        jitter: float,
        workloads: tuple[str, ...],
        seed: int,
    ) -> MonitorBeside:
        store = SampleStore(db)
        await store.start()
        monitor = Monitor(
            providers,
            targets_from_config(config),
            store,
            workloads=workloads,
            max_pacing_wait_s=interval_s,
        )
        return cls(monitor, store, Schedule(interval_s, jitter=jitter, rng=random.Random(seed)))

    async def _loop(self) -> None:
        index = 0
        while not self._stop.is_set():
            delay = self.schedule.delay()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                if self._stop.is_set():
                    break
            try:
                report = await self.monitor.run_round(index)
            except Exception as exc:  # a scenario goes on without probes rather than fail
                log.warning("monitor round %d failed: %r", index, exc)
            else:
                self.samples.extend(report.samples)
                self.rounds += 1
            index += 1

    async def close(self) -> None:
        self._stop.set()
        await stop_task(self._task, reraise=True)
        await self.monitor.close()
        await self.store.close()
