"""What the load tester sends: synthetic prompts of a target length, prompt files, accuracy tasks, traces.

Synthetic prompts are made of common English words, about one token each, so an ``--input-tokens``
of 512 sends roughly 512 prompt tokens (the server's ``usage`` reports the exact count, which is what
the results use).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailgate.accuracy import Task, generate

_WORDS = (  # noqa: SIM905 - a word list reads better as running text
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name"
).split()


class WorkloadError(ValueError):
    """A workload option or file is wrong; the message names the option or the file and line."""


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token length: fixed, or normal(mean, stdev) clipped to [min, max]."""

    mean: int
    stdev: float = 0.0
    min: int = 1
    max: int = 1_000_000

    def draw(self, rng: random.Random) -> int:
        if self.stdev <= 0:
            return self.mean
        return int(min(self.max, max(self.min, round(rng.gauss(self.mean, self.stdev)))))

    @classmethod
    def parse(cls, text: str, option: str = "--input-tokens") -> LengthDist:
        """``512`` or ``mean=512,stdev=128,min=64,max=2048``."""
        text = text.strip()
        if text.isdigit():
            return cls(int(text), 0.0, int(text), int(text))
        fields: dict[str, float] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in ("mean", "stdev", "min", "max"):
                raise WorkloadError(
                    f"{option}: cannot read {part!r}; use a number (512) or mean=512,stdev=128,min=64,max=2048"
                )
            try:
                fields[key] = float(value)
            except ValueError:
                raise WorkloadError(f"{option}: {key}={value!r} is not a number") from None
        if "mean" not in fields:
            raise WorkloadError(f"{option}: a distribution needs mean=…")
        dist = cls(
            int(fields["mean"]), fields.get("stdev", 0.0), int(fields.get("min", 1)), int(fields.get("max", 1_000_000))
        )
        if dist.min < 1 or dist.min > dist.max or not dist.min <= dist.mean <= dist.max:
            raise WorkloadError(f"{option}: need 1 <= min <= mean <= max, got {text!r}")
        return dist


RequestBody = dict[str, Any]  # reason: a chat request body as sent: free-form JSON the upstream client encodes
"""A request body (OpenAI chat) without ``model``; also a prompt file's line (``{"prompt"|"messages", ...}``)."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: the body (without ``model``), and the task when it is an accuracy question."""

    body: RequestBody
    stream: bool
    task: Task | None = None
    traffic_class: str | None = None
    intended_tokens: int | None = None
    """The prompt length this request was built to have (exact with --tokenizer, else an estimate)."""
    check: Callable[[RequestBody, list[bytes]], bool] | None = None
    """Grades a successful answer that is not a task's: called with the body sent and the answer's raw frames
    (SSE frames, or the whole body); what it returns is the request's ``accuracy`` (True: a good answer).
    The scenario runner checks tool-call answers this way (``load.tool_calls``)."""


@dataclass
class Workload:
    """Produces request bodies in turn (``next()``), deterministically for a seed."""

    input_tokens: LengthDist = field(default_factory=lambda: LengthDist(128))
    max_tokens: int = 128
    stream: bool = True
    temperature: float | None = None
    prompts: list[RequestBody] | None = None
    accuracy: bool = False
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _tasks: list[Task] = field(init=False, repr=False)
    _i: int = field(init=False, default=0, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._tasks = generate(300, seed=self.seed) if self.accuracy else []

    def synthetic_prompt(self, tokens: int) -> str:
        # choices() draws all the words in one call: a third of the cost of a choice() per word, which
        # was the generator's largest own cost at its ceiling (docs/benchmarks.md, load generator capacity).
        words = self._rng.choices(_WORDS, k=max(1, tokens - 8))
        return "Summarise the following notes in a few sentences: " + " ".join(words)

    def for_entry(self, entry: TraceEntry) -> RequestSpec:
        """The request a trace line describes: its input length, output length and traffic class."""
        body: RequestBody = {
            "max_tokens": max(1, entry.output_tokens or self.max_tokens),
            "stream": entry.stream if entry.stream is not None else self.stream,
            "messages": [
                {"role": "user", "content": self.synthetic_prompt(entry.input_tokens or self.input_tokens.mean)}
            ],
        }
        if body["stream"]:
            body["stream_options"] = {"include_usage": True}
        return RequestSpec(body=body, stream=bool(body["stream"]), traffic_class=entry.cls)

    def next(self) -> RequestSpec:
        i = self._i
        self._i += 1
        body: RequestBody = {"max_tokens": self.max_tokens, "stream": self.stream}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        task = None
        if self._tasks:
            task = self._tasks[i % len(self._tasks)]
            body["messages"] = [{"role": "user", "content": task.prompt}]
            body["max_tokens"] = max(self.max_tokens, 64)
        elif self.prompts:
            entry = self.prompts[i % len(self.prompts)]
            body.update({k: v for k, v in entry.items() if k in ("messages", "max_tokens", "temperature")})
        else:
            body["messages"] = [{"role": "user", "content": self.synthetic_prompt(self.input_tokens.draw(self._rng))}]
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return RequestSpec(body=body, stream=self.stream, task=task)


def load_prompts(path: str | Path) -> list[RequestBody]:
    """A JSONL file: each line ``{"prompt": "..."}`` or ``{"messages": [...]}``, optionally ``max_tokens``."""
    out: list[RequestBody] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read prompt file: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not ("prompt" in obj or "messages" in obj):
            raise WorkloadError(f'{path}:{n}: expected an object with "prompt" or "messages"')
        if "prompt" in obj:
            obj = {**obj, "messages": [{"role": "user", "content": str(obj.pop("prompt"))}]}
        out.append(obj)
    if not out:
        raise WorkloadError(f"{path}: no prompts in the file")
    return out


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One line of a traffic trace (what the gateway writes with ``trace.path``)."""

    t: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    cls: str | None = None
    stream: bool | None = None


def load_trace(path: str | Path) -> list[TraceEntry]:
    """Read a trace JSONL (``t`` seconds, ``input_tokens``, ``output_tokens``, ``class``, ``stream``), sorted by t."""
    entries: list[TraceEntry] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read trace: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            t = float(obj["t"])
            entry = TraceEntry(
                t=t,
                input_tokens=int(obj["input_tokens"]) if obj.get("input_tokens") is not None else None,
                output_tokens=int(obj["output_tokens"]) if obj.get("output_tokens") is not None else None,
                cls=obj.get("class"),
                stream=obj.get("stream"),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise WorkloadError(
                f'{path}:{n}: not a trace line ({type(exc).__name__}: {exc}); need at least {{"t": seconds}}'
            ) from None
        if t < 0:
            raise WorkloadError(f"{path}:{n}: t must be >= 0, got {t}")
        entries.append(entry)
    if not entries:
        raise WorkloadError(f"{path}: the trace is empty")
    entries.sort(key=lambda e: e.t)
    start = entries[0].t
    return [TraceEntry(e.t - start, e.input_tokens, e.output_tokens, e.cls, e.stream) for e in entries]
