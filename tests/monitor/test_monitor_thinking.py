"""Monitor probes of a thinking model: time to first answer token and reasoning tokens beside TTFT and output
tokens, in the samples and the leaderboard; accuracy graded on the answer, not the reasoning."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from conftest import SimFactory
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import compute
from tailgate.ledger.samples import SampleStore, read_samples
from tailgate.monitor.runner import Monitor, targets_from_config


async def test_thinking_probes_record_the_first_answer_token(sim: SimFactory, tmp_path: Path) -> None:
    p = await sim("reasoner", time_scale=0.3, engine={"reasoning_median": 20, "reasoning_sigma": 0.0, "accuracy": 1.0})
    data = {
        "providers": {"r": {"base_url": p.url}},
        "models": {"qwen3": {"routes": [{"provider": "r", "model": "qwen3"}]}},
    }
    cfg = validate_data(data, GatewayConfig, "test-config")
    db = tmp_path / "m.db"
    async with SampleStore(db) as store:
        monitor = Monitor(resolve_providers(cfg), targets_from_config(cfg), store)
        try:
            for i in range(3):
                await monitor.run_round(i)
        finally:
            await monitor.close()
    with closing(open_db(db)) as conn:
        samples = read_samples(conn)
        (row,) = compute(conn, window_s=3600, now=samples[-1].ts + 1)
    assert len(samples) == 9
    for s in samples:
        assert s.ok
        assert s.reasoning_tokens == 20
        assert s.ttft_ms is not None
        assert s.ttft_answer_ms is not None
        assert s.ttft_answer_ms > s.ttft_ms
    assert all(s.accuracy_ok for s in samples if s.workload == "accuracy")  # the reasoning is not the answer
    assert row.ttft_answer_p50_ms is not None
    assert row.ttft_p50_ms is not None
    assert row.ttft_answer_p50_ms > row.ttft_p50_ms
