"""Answer quality on the request path: every chat answer's free quality signals, and a non-answer held before
its first byte so the request can move to another route (docs/routing.md, promise 8 and "An answer that is not
an answer").

The attempt (attempts.py) asks :meth:`AnswerQuality.begin` for an :class:`Observed` per chat attempt (``None``
for the other APIs) and tells it what came back: a whole body (:meth:`Observed.unary`: a small ``msgspec``
decode of the fields a verdict needs, no other work) or, for a stream that ended without a token, its held frames
(:meth:`Observed.stream_ended`). Either says whether to hold the answer (a content-filter refusal or an empty
answer, the alias retries that reason, another route is left). A stream whose request declared tools or asked
for JSON keeps its frames for the books (:attr:`Observed.frames`); any other stream keeps nothing.

The judging itself runs with the request's books, after the client has its answer (bookkeeping.py calls
:meth:`AnswerQuality.judge`): ``tailgate.quality.signals`` over the answer, counted three ways — the Prometheus
counters (``tailgate_quality_checked_total`` / ``…_signals_total``), the tally the store gets
(``quality_counts``, health/quality_sync.py) and promise 8's board (``routing.quality.QualityBoard``, read by the
``adaptive`` policy).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from tailgate.ledger.quality import QualityTally
from tailgate.quality import signals as sig
from tailgate.quality.gate import FirstByteGate
from tailgate.routing.quality import QualityBoard, QualitySettings, settings_from

if TYPE_CHECKING:
    from tailgate.config.schema import GatewayConfig
    from tailgate.gateway.metrics.gateway_metrics import CounterFamily
    from tailgate.quality.metrics import QualityMetrics
    from tailgate.routing import Route
    from tailgate.upstream import CallResult

__all__ = ["BOARD_SIGNAL", "AnswerQuality", "Observed", "board_for"]

_NONE: frozenset[str] = frozenset()
CONTENT_FILTERED = "content_filtered"
EMPTY_ANSWER = "empty_answer"

BOARD_SIGNAL: dict[str, str] = {
    sig.TOOL_ARGS_INVALID_JSON: "tool_call",
    sig.TOOL_ARGS_SCHEMA_MISMATCH: "tool_call",
    sig.TOOL_UNKNOWN_NAME: "tool_call",
    sig.EMPTY_ANSWER: "empty",
    sig.CONTENT_FILTERED: "content_filter",
    sig.JSON_INVALID: "json",
    sig.REASONING_MISSING: "reasoning",
}
"""A signal's name (``tailgate.quality.signals``: the store's, the metrics') → the board's (promise 8's,
``routing.quality.signals``). The three tool-call signals are one on the board: a tool call that is broken
in any way."""
_TOOL_SIGNALS = frozenset({sig.TOOL_ARGS_INVALID_JSON, sig.TOOL_ARGS_SCHEMA_MISMATCH, sig.TOOL_UNKNOWN_NAME})
_BOARD_TOOL = "board:tool_call"


class _Message(msgspec.Struct):
    content: Any = None
    tool_calls: Any = None
    refusal: Any = None
    reasoning_content: Any = None
    reasoning: Any = None


class _Choice(msgspec.Struct):
    message: _Message | None = None
    finish_reason: str | None = None


class _Head(msgspec.Struct):
    choices: list[_Choice] | None = None


_EMPTY = _Message()
_decode_head = msgspec.json.Decoder(_Head).decode
_decode_any = msgspec.json.Decoder().decode


@dataclass(slots=True)
class _Fast:
    """What one whole chat body says, from the small decode: its verdict (``content_filtered`` /
    ``empty_answer`` as ``quality.gate.non_answer`` says them, or None), and the signals it already answers."""

    verdict: str | None
    filtered: bool
    empty: bool | None
    """None: not judged (cut by ``length``, or filtered)."""
    reasoning: bool


def _fast(raw: bytes) -> _Fast | None:
    try:
        head = _decode_head(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not head.choices:
        return None
    choice = head.choices[0]
    m = choice.message or _EMPTY
    content = m.content
    if type(content) is str:
        output = bool(content) and (not content[0].isspace() or bool(content.strip()))  # one call, usually
    else:
        output = bool(_text(content).strip())
    output = output or bool(m.tool_calls or m.refusal)
    reasoning = bool(m.reasoning_content or m.reasoning)
    reason = choice.finish_reason
    if output:  # the common answer
        return _Fast(None, False, None if reason == "length" or reason in sig.FILTER_REASONS else False, reasoning)
    filtered = reason in sig.FILTER_REASONS
    empty = None if (reason == "length" or filtered) else True
    verdict = CONTENT_FILTERED if filtered else EMPTY_ANSWER if empty and not reasoning else None
    return _Fast(verdict, filtered, empty, reasoning)


def _text(value: Any) -> str:
    if isinstance(value, list):  # content parts
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, Mapping))
    return ""


_ASKS = frozenset(
    {"tools", "response_format", "reasoning_effort", "thinking", "enable_thinking", "chat_template_kwargs"}
)
"""The request fields a judgement reads beyond the answer (most requests have none of them)."""


def wants_whole(request: Mapping[str, Any]) -> bool:
    """Does judging this request's answer need the answer itself (tool calls to check, JSON asked for)?"""
    if request.get("tools"):
        return True
    fmt = request.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema")


def _asks(request: Mapping[str, Any]) -> tuple[bool, bool]:
    """(the answer is needed whole, thinking was asked): one set operation for the common request."""
    if _ASKS.isdisjoint(request):
        return False, False
    return wants_whole(request), sig.thinking_requested(request)


@dataclass(slots=True, eq=False)
class Observed:
    """One chat attempt as the quality checks see it (see the module docstring)."""

    route: Route
    request: Mapping[str, Any]
    retry: frozenset[str]
    """The non-answers this attempt may hold (the alias's retry settings; empty when no route is left)."""
    whole: bool
    """The request declared tools or asked for JSON: the answer is kept for the books."""
    thinking: bool = False
    """The request asked for thinking (``reasoning_missing`` is checked)."""
    body: bytes | None = None
    fast: _Fast | None = None
    frames: list[bytes] | None = None
    """A stream's frames as the client got them (only when ``whole``)."""
    verdict: str | None = None
    """A stream that ended without a token: the first-byte gate's verdict."""
    judged: bool = False

    def unary(self, raw: bytes) -> bool:
        """The whole body came: True when it is a non-answer this attempt holds (not sent; retried)."""
        self.body = raw
        self.fast = fast = _fast(raw)
        return fast is not None and fast.verdict is not None and fast.verdict in self.retry

    def stream_ended(self, held: Iterable[bytes]) -> bool:
        """A stream ended with no token: its held frames through the first-byte gate. True when it is a
        non-answer this attempt holds."""
        gate = FirstByteGate()
        for chunk in _chunks(held):
            if gate.feed(chunk) != "hold":
                break
        verdict = gate.end()
        self.verdict = verdict if verdict in (CONTENT_FILTERED, EMPTY_ANSWER) else None
        return self.verdict is not None and self.verdict in self.retry


def _chunks(blobs: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    """The decoded ``data:`` payloads of SSE frames (one frame or several joined per blob)."""
    for blob in blobs:
        for frame in blob.split(b"\n\n"):
            for line in frame.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload and payload != b"[DONE]":
                        try:
                            obj = _decode_any(payload)
                        except (msgspec.DecodeError, UnicodeDecodeError):
                            continue
                        if isinstance(obj, dict):
                            yield obj


def board_for(config: GatewayConfig) -> tuple[QualitySettings, dict[str, QualitySettings]]:
    """``routing.quality`` and each alias's merged settings, for :class:`QualityBoard`."""
    rq, slow = config.routing.quality, config.routing.adaptive.slow_start
    per_alias = {a: settings_from(rq.merged(m.quality), slow) for a, m in config.models.items()}
    return settings_from(rq, slow), per_alias


def _retry_of(config: GatewayConfig) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for alias, model in config.models.items():
        merged = config.routing.quality.merged(model.quality)
        reasons = set()
        if merged.retry_empty:
            reasons.add(EMPTY_ANSWER)
        if merged.retry_filtered:
            reasons.add(CONTENT_FILTERED)
        out[alias] = frozenset(reasons)
    return out


@dataclass(slots=True, eq=False)
class AnswerQuality:
    """The gateway's answer-quality owner: the board (shared by every ``adaptive`` policy), the counters, the
    tally for the store, and each alias's retry settings. A reload calls :meth:`configure`."""

    board: QualityBoard
    metrics: QualityMetrics
    retries: CounterFamily
    clock: Callable[[], float] = time.monotonic
    tally: QualityTally = field(default_factory=QualityTally)
    retry: dict[str, frozenset[str]] = field(default_factory=dict)
    _pending: dict[tuple[str, str], dict[str, list[int]]] = field(default_factory=dict)
    """(provider, model) → signal → [checked, hits] judged since the last :meth:`flush` (board signals as
    ``board:<name>``)."""

    @classmethod
    def of(cls, config: GatewayConfig, metrics: QualityMetrics, retries: CounterFamily) -> AnswerQuality:
        settings, per_alias = board_for(config)
        # 10 s buckets over the default 10-minute window; a shorter window (a time-scaled run) gets finer ones
        shortest = min([settings.window_s, *(s.window_s for s in per_alias.values())])
        bucket = min(10.0, shortest / 60.0)
        board = QualityBoard(settings, per_alias, bucket_s=bucket, recompute_s=config.routing.adaptive.recompute)
        return cls(board, metrics, retries, retry=_retry_of(config))

    def configure(self, config: GatewayConfig) -> None:
        self.board.configure(*board_for(config))
        self.retry = _retry_of(config)

    def begin(self, alias: str, route: Route, request: Mapping[str, Any], may_retry: bool) -> Observed:
        """One chat attempt at ``route``: ``may_retry`` when another route is left to try."""
        retry = self.retry.get(alias, _NONE) if may_retry else _NONE
        whole, thinking = _asks(request)
        return Observed(route, request, retry, whole, thinking)

    def held(self, alias: str, obs: Observed) -> None:
        """``obs`` was held as a non-answer (not sent): it is judged now, and the retry counted."""
        reason = obs.fast.verdict if obs.fast is not None else obs.verdict
        self.retries.labels(alias, obs.route.provider, reason or "").inc()
        self.judge(obs, None)

    def judge(self, obs: Observed, result: CallResult | None) -> None:
        """The signals of an answered attempt (bookkeeping.py; once per ``obs``), counted at the next
        :meth:`flush` — the books call it after each batch, so a busy gateway counts a batch of answers at once."""
        if obs.judged:
            return
        obs.judged = True
        seen = self._observations(obs, result)
        if not seen:
            return
        route = obs.route
        key = (route.provider, route.model)
        cells = self._pending.get(key)
        if cells is None:
            cells = self._pending[key] = {}
        tool_hit: bool | None = None
        for signal, hit in seen:
            cell = cells.get(signal)
            if cell is None:
                cell = cells[signal] = [0, 0]
            cell[0] += 1
            if hit:
                cell[1] += 1
            if signal in _TOOL_SIGNALS:
                tool_hit = bool(tool_hit) or hit
        if tool_hit is not None:  # the board's one tool-call signal: a call broken in any way
            cell = cells.get(_BOARD_TOOL)
            if cell is None:
                cell = cells[_BOARD_TOOL] = [0, 0]
            cell[0] += 1
            cell[1] += tool_hit

    def flush(self) -> None:
        """What :meth:`judge` gathered, onto the counters, the store's tally and the board (at once, now)."""
        pending = self._pending
        if not pending:
            return
        self._pending = {}
        now = self.clock()
        metrics, tally, board = self.metrics, self.tally, self.board
        for (provider, model), cells in pending.items():
            key = (provider, model)
            for signal, (checked, hits) in cells.items():
                if signal == _BOARD_TOOL:
                    board.add(key, "tool_call", checked - hits, checked, now)
                    continue
                if checked > hits:
                    metrics.count(provider, model, signal, False, checked - hits)
                    tally.add(provider, model, signal, False, checked - hits)
                if hits:
                    metrics.count(provider, model, signal, True, hits)
                    tally.add(provider, model, signal, True, hits)
                if (name := BOARD_SIGNAL.get(signal, signal)) != "tool_call":
                    board.add(key, name, checked - hits, checked, now)

    def count(self, provider: str, model: str, observations: Iterable[sig.Observation]) -> None:
        """Observations of one answer, counted now (the monitor's way; tests)."""
        now = self.clock()
        board_ok: dict[str, bool] = {}
        for o in observations:
            self.metrics.count(provider, model, o.signal, o.hit)
            self.tally.add(provider, model, o.signal, o.hit)
            name = BOARD_SIGNAL.get(o.signal, o.signal)
            board_ok[name] = board_ok.get(name, True) and not o.hit
        key = (provider, model)
        for name, ok in board_ok.items():
            self.board.record(key, name, ok, now)

    def _observations(self, obs: Observed, result: CallResult | None) -> list[tuple[str, bool]]:
        request = obs.request
        if obs.body is not None:  # a whole answer
            if obs.whole:
                try:
                    answer = _decode_any(obs.body)
                except msgspec.DecodeError:
                    return []
                return _pairs(sig.check_chat(request, answer)) if isinstance(answer, dict) else []
            fast = obs.fast
            if fast is None:
                return []
            if fast.empty is None:
                out = [(sig.CONTENT_FILTERED, fast.filtered)]
            else:
                out = [(sig.CONTENT_FILTERED, fast.filtered), (sig.EMPTY_ANSWER, fast.empty)]
            if obs.thinking:
                shown = fast.reasoning or bool(result is not None and result.reasoning_tokens)
                out.append((sig.REASONING_MISSING, not shown))
            return out
        if obs.frames is not None and obs.verdict is None:  # a stream kept whole
            return _pairs(sig.check_chat(request, sig.assemble_chat_stream(_chunks(obs.frames))))
        # a stream: the gate's verdict when it ended without a token, else it carried tokens
        if obs.verdict is not None:
            if obs.verdict == CONTENT_FILTERED:
                return [(sig.CONTENT_FILTERED, True)]
            return [(sig.CONTENT_FILTERED, False), (sig.EMPTY_ANSWER, True)]
        if result is None or result.error_class is not None:
            return []
        if result.ttft_answer_ms is not None:  # an answer token came (reasoning alone is not judged here)
            out = [(sig.CONTENT_FILTERED, False), (sig.EMPTY_ANSWER, False)]
        else:
            out = [(sig.CONTENT_FILTERED, False)]
        if obs.thinking:
            out.append((sig.REASONING_MISSING, not result.reasoning_tokens))
        return out


def _pairs(observations: Iterable[sig.Observation]) -> list[tuple[str, bool]]:
    return [(o.signal, o.hit) for o in observations]
