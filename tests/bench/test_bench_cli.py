"""`tailgate bench` from the command line: exit codes 0 / 99 / 2, outputs, and clear errors on bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import MockProcess
from tailgate.cli import main


def _bench(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["bench", *args])
    return result.exit_code, result.output


@pytest.mark.timeout(60)
def test_sweep_writes_json_csv_html_and_exits_0(mock_process: Callable[..., MockProcess], tmp_path: Path) -> None:
    """A 1,4 sweep writes the results (contract names), a decay table, CSV and HTML; thresholds met → exit 0."""
    mp = mock_process("--preset", "provider-a", "--port", "0", "--time-scale", "0.05")
    out, csv, html = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.html"
    code, output = _bench(
        "--base-url",
        mp.url,
        "--model",
        "m",
        "--concurrency",
        "1,4",
        "--duration",
        "1s",
        "--warmup",
        "0.2s",
        "--max-tokens",
        "8",
        "--threshold",
        "p90(e2e)<5s",
        "--threshold",
        "error_rate<1%",
        "--out",
        str(out),
        "--csv",
        str(csv),
        "--html",
        str(html),
    )
    assert code == 0, output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "tailgate.bench/v1"
    assert [r["load"]["concurrency"] for r in doc["runs"]] == [1, 4]
    for run in doc["runs"]:
        assert run["successes"] > 0
        for name in ("ttft_ms", "e2e_ms", "itl_ms", "tpot_ms", "output_tokens_per_s"):
            assert set(run["metrics"][name]) >= {"p50", "p90", "p95", "p99", "max", "mean"}
        assert run["throughput"]["req_per_s"] > 0
    assert [d["concurrency"] for d in doc["decay"]][-1] == 4
    assert len(csv.read_text().splitlines()) == 3
    assert "<svg" in html.read_text()


@pytest.mark.timeout(60)
def test_breached_threshold_exits_99(mock_process: Callable[..., MockProcess]) -> None:
    """A threshold the run cannot meet makes the command exit 99 (k6's code)."""
    mp = mock_process("--preset", "provider-a", "--port", "0", "--time-scale", "0.05")
    code, output = _bench(
        "--base-url",
        mp.url,
        "--model",
        "m",
        "--requests",
        "6",
        "--duration",
        "0",
        "--warmup",
        "0",
        "--max-tokens",
        "4",
        "--threshold",
        "p50(ttft)<1ms",
    )
    assert code == 99, output
    assert "FAIL p50(ttft)<1ms" in output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--threshold", "p90(e2e)<<3s"], "p90(e2e)<<3s"),
        (["--stages", "30s:10,1x:5"], "'1x'"),
        (["--concurrency", "1,ten"], "'ten'"),
        (["--concurrency", "1", "--rate", "5"], "choose one load model"),
        (["--input-tokens", "mean=x"], "mean='x'"),
    ],
)
def test_bad_load_syntax_exits_2_naming_the_token(args: list[str], needle: str) -> None:
    """Bad threshold, stage, level or length syntax → exit 2 with a message naming the offending token."""
    code, output = _bench("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--no-preflight", *args)
    assert code == 2, output
    assert needle in output


def test_unreachable_target_is_one_clear_message() -> None:
    """A target nobody listens on: exit 2 before the run, one message naming it (not a thousand errors)."""
    code, output = _bench("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--duration", "1s")
    assert code == 2
    assert "cannot reach target 'target' at http://127.0.0.1:9/v1" in output
    assert output.count("error:") == 1


@pytest.mark.timeout(30)
def test_non_openai_json_is_classified_malformed(tmp_path: Path) -> None:
    """A server that answers 200 with JSON that is not OpenAI's is reported as malformed, with an example."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class NotOpenAI(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"status": "ok", "result": [1, 2, 3]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), NotOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        code, output = _bench("--base-url", url, "--model", "m", "--no-stream", "--duration", "1s")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2, output
    assert "does not answer like an OpenAI API (malformed)" in output
