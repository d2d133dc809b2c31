"""The quality counters in a Prometheus exposition."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tailgate.quality.metrics import QualityMetrics
from tailgate.quality.signals import check_chat


def _samples(m: QualityMetrics) -> dict[tuple[str, str, str, str], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            if s.name.endswith("_total"):
                out[(s.name, s.labels["provider"], s.labels["model"], s.labels["signal"])] = s.value
    return out


def test_observations_and_canaries_are_counted() -> None:
    m = QualityMetrics()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    bad = {"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}}]}
    good = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    m.observe("p1", "m", check_chat({"tools": tools}, bad))
    m.observe("p1", "m", check_chat({"tools": tools}, good))
    m.canary("p1", "m", right=False)
    m.canary("p1", "m", right=True)
    got = _samples(m)
    assert got[("tailgate_quality_checked_total", "p1", "m", "tool_args_invalid_json")] == 1
    assert got[("tailgate_quality_signals_total", "p1", "m", "tool_args_invalid_json")] == 1
    assert got[("tailgate_quality_checked_total", "p1", "m", "empty_answer")] == 2  # a tool call is an answer
    assert got[("tailgate_quality_signals_total", "p1", "m", "empty_answer")] == 0
    assert got[("tailgate_quality_checked_total", "p1", "m", "content_filtered")] == 2
    assert got[("tailgate_quality_checked_total", "p1", "m", "canary_wrong")] == 2
    assert got[("tailgate_quality_signals_total", "p1", "m", "canary_wrong")] == 1
