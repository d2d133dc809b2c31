"""Per-token cost of the realism work (issue 13) on the hot paths, against a baseline source tree.

Thinking, tool calls and the first-answer-token measurement added a branch per token to the simulator's
engine step and stream writer and to the measurement core's per-frame work. This measures, in one run,
interleaved, the same three loops with this tree's code and with a baseline tree's (``git archive REV src |
tar -x -C DIR``), each in its own subprocess:

* ``engine``: ``Engine._emit`` over a batch of 64 plain sequences (one token each per call);
* ``writer``: ``SSEWriter.flush`` of one plain content token (chunk JSON, SSE and HTTP chunk framing, the
  timing bookkeeping; the socket write is a no-op);
* ``core``: what ``upstream.call`` does per chunk — ``decode_frame`` + ``token_count`` (+ the answer check).

    python benchmarks/realism_hotpath.py --baseline /tmp/base/src [--rounds 5]
    python benchmarks/realism_hotpath.py --baseline /tmp/base/src --instructions   # needs valgrind

Each subprocess keeps the fastest of 7 repetitions of each loop; the script prints the median over rounds
(ns per token) and the median and range of the per-round ratios this tree / baseline (paired rounds run
back to back, so slow drifts in machine load cancel).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

_PROBE = r"""
import json, random, sys, time
from tailgate.sim.engine import Engine, Sequence
from tailgate.sim.presets import preset
from tailgate.sim.stream import SSEWriter
from tailgate.sim.text import token_at
from tailgate.upstream import _frames

def engine_ns(n=2000):
    eng = Engine(preset("instant"), token_fn=token_at)
    batch = [Sequence(f"s{i}", prompt_tokens=1, target=10**9, seed=i, notify_each=False) for i in range(64)]
    for s in batch:
        eng._decoding[s.id] = s
    t0 = time.perf_counter()
    for _ in range(n):
        eng._emit(batch, 0.0)
    return (time.perf_counter() - t0) / (n * len(batch)) * 1e9

class _Sink:
    def write(self, data):
        pass
    def is_closing(self):
        return False

def writer_ns(n=50000):
    seq = Sequence("chatcmpl-x", prompt_tokens=3, target=10**9, seed=1)
    w = SSEWriter(_Sink(), chat=True, created=1, model="m", cut=None, bad_at=None)
    out = seq.out
    t0 = time.perf_counter()
    for _ in range(n):  # one token per engine step, as a stream at low load sees it
        out.append(" token")
        w.flush(seq)
    return (time.perf_counter() - t0) / n * 1e9

def core_ns(n=100000):
    payload = (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
               b'"choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}')
    has_answer = getattr(_frames, "has_answer", None)
    answer = None
    t0 = time.perf_counter()
    for _ in range(n):
        frame = _frames.decode_frame(payload)
        k = _frames.token_count(frame)
        if k and has_answer is not None and answer is None:
            answer = has_answer(frame)  # set once, as call.py does
    return (time.perf_counter() - t0) / n * 1e9

# the fastest of 7 repetitions: the least disturbed by other processes on a shared machine
loops = (("engine", engine_ns), ("writer", writer_ns), ("core", core_ns))
print(json.dumps({k: min(f() for _ in range(7)) for k, f in loops}))
"""


# One loop, N times, for valgrind: instructions per token = (Ir(N) − Ir(0)) / tokens, which machine load
# cannot disturb (on a shared machine the timings above vary ±50 % from round to round).
_IR_PROBE = r"""
import sys
from tailgate.sim.engine import Engine, Sequence
from tailgate.sim.presets import preset
from tailgate.sim.stream import SSEWriter
from tailgate.sim.text import token_at
from tailgate.upstream import _frames
which, n = sys.argv[1], int(sys.argv[2])
if which == "engine":
    eng = Engine(preset("instant"), token_fn=token_at)
    batch = [Sequence(f"s{i}", prompt_tokens=1, target=10**9, seed=i, notify_each=False) for i in range(64)]
    for s in batch:
        eng._decoding[s.id] = s
    for _ in range(n):
        eng._emit(batch, 0.0)
elif which == "writer":
    class Sink:
        def write(self, d):
            pass
        def is_closing(self):
            return False
    seq = Sequence("chatcmpl-x", prompt_tokens=3, target=10**9, seed=1)
    w = SSEWriter(Sink(), chat=True, created=1, model="m", cut=None, bad_at=None)
    for _ in range(n):
        seq.out.append(" token")
        w.flush(seq)
else:
    payload = (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
               b'"choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}')
    has_answer = getattr(_frames, "has_answer", None)
    answer = None
    for _ in range(n):
        frame = _frames.decode_frame(payload)
        k = _frames.token_count(frame)
        if k and has_answer is not None and answer is None:
            answer = has_answer(frame)
"""
_IR_LOOPS = (("engine", 300, 300 * 64), ("writer", 20000, 20000), ("core", 20000, 20000))


def instructions(src: Path, which: str, n: int) -> int:
    valgrind = shutil.which("valgrind")
    assert valgrind is not None
    proc = subprocess.run(
        [
            valgrind,
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            _IR_PROBE,
            which,
            str(n),
        ],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    assert match is not None, proc.stderr[-2000:]
    return int(match.group(1))


def run_instructions(baseline: Path) -> None:
    print(f"{'loop':8} {'baseline instr/token':>21} {'this tree instr/token':>22} {'ratio':>7}")
    for which, n, tokens in _IR_LOOPS:
        per = [(instructions(t, which, n) - instructions(t, which, 0)) / tokens for t in (baseline, SRC)]
        print(f"{which:8} {per[0]:21.0f} {per[1]:22.0f} {per[1] / per[0]:7.3f}")


def run(src: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True, timeout=300
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="the baseline tree's src/ folder")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--instructions", action="store_true", help="count instructions with valgrind instead")
    args = ap.parse_args()
    if args.instructions:
        run_instructions(args.baseline)
        return 0
    ours: list[dict[str, float]] = []
    base: list[dict[str, float]] = []
    for i in range(args.rounds):  # interleaved, order alternating, so machine load hits both alike
        if i % 2:
            ours.append(run(SRC))
            base.append(run(args.baseline))
        else:
            base.append(run(args.baseline))
            ours.append(run(SRC))
    print(f"{'loop':8} {'baseline ns/token':>18} {'this tree ns/token':>19} {'ratio (paired median)':>22}  range")
    for key in ("engine", "writer", "core"):
        b = statistics.median(r[key] for r in base)
        o = statistics.median(r[key] for r in ours)
        paired = sorted(x[key] / y[key] for x, y in zip(ours, base, strict=True))
        print(f"{key:8} {b:18.0f} {o:19.0f} {statistics.median(paired):22.3f}  {paired[0]:.2f}–{paired[-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
