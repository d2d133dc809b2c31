"""The verifiable task suite: generated questions with exact answers, no dataset download.

Three kinds, each a fixed English template so that any model can answer it and a grader can check the
answer without judgement:

* ``arithmetic``: ``Compute 347 * 29 + 18. Reply with the final number only.``
* ``counting``:   ``How many times does the letter 'r' appear in "rbrrq xr"? Reply with the number only.``
* ``ordering``:   ``Sort these numbers in ascending order: 42, 7, 19. Reply with the numbers separated by
  commas only.``

The canary set (:data:`CANARY_KINDS`, :func:`canary_round`) adds three kinds that catch a degraded model
where the first three may not:

* ``format``: ``Write the word "delta" in upper case inside square brackets, 3 times, separated by single
  spaces. Reply with that only.`` → ``[DELTA] [DELTA] [DELTA]`` (graded on the answer's last line, exactly).
* ``recall``: a list of :data:`RECALL_RECORDS` ``key-…: code …`` records (about 2,200 characters), then
  ``What is the code for key-…? Reply with the code only.`` (long-context recall).
* ``tool``: ``Call the function record_order with item "…", quantity N and priority "…". Reply with the
  tool call only.`` with one declared tool whose ``parameters`` schema the call must match; graded by
  :func:`grade_call` on the call's name and arguments (as JSON, key order free).

:func:`solve` recognises the templates in a prompt and computes the exact answer; the simulator uses it
to answer correctly with a configured probability, and bench/monitor use :func:`grade` to score real
providers. The suite is deterministic for a seed, so two runs (or two providers) get the same questions.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

KINDS = ("arithmetic", "counting", "ordering")
"""The original suite: what ``generate`` cycles through by default (bench's ``accuracy`` workload)."""
TEXT_CANARY_KINDS = (*KINDS, "format", "recall")
"""The canaries answered in text (no tool to declare)."""
CANARY_KINDS = (*TEXT_CANARY_KINDS, "tool")
"""The whole canary set: one task of each per :func:`canary_round`; the monitor's ``accuracy`` workload cycles it."""
ALL_KINDS = CANARY_KINDS
RECALL_RECORDS = 100
TOOL_NAME = "record_order"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "item": {"type": "string"},
        "quantity": {"type": "integer", "minimum": 1},
        "priority": {"type": "string", "enum": ["low", "normal", "high"]},
    },
    "required": ["item", "quantity", "priority"],
    "additionalProperties": False,
}
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": TOOL_NAME, "description": "Record one order.", "parameters": TOOL_SCHEMA},
}
_WORDS = ("alpha", "delta", "amber", "cobalt", "falcon", "harbor", "juniper", "maple", "nectar", "orbit", "quartz")

_ARITH = re.compile(r"Compute (-?\d+) ([+*-]) (-?\d+) ([+*-]) (-?\d+)\. Reply with the final number only\.")
_COUNT = re.compile(r"How many times does the letter '([a-z])' appear in \"([a-z ]+)\"\? Reply with the number only\.")
_ORDER = re.compile(
    r"Sort these numbers in ascending order: (-?\d+(?:, -?\d+)+)\. "
    r"Reply with the numbers separated by commas only\."
)
_FORMAT = re.compile(
    r'Write the word "([a-z]+)" in upper case inside square brackets, (\d) times, separated by single spaces\. '
    r"Reply with that only\."
)
_RECALL_Q = re.compile(r"What is the code for (key-[a-z0-9]+)\? Reply with the code only\.")
_TOOL = re.compile(
    r'Call the function ([a-z_]+) with item "([a-z]+)", quantity (\d+) and priority "([a-z]+)"\. '
    r"Reply with the tool call only\."
)
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True, slots=True)
class Task:
    """One question: ``prompt`` goes to the model as the user message; ``answer`` is exact."""

    id: str
    kind: str
    prompt: str
    answer: str
    """The exact answer; for a ``tool`` task the call's arguments as canonical JSON (sorted keys)."""
    tools: tuple[dict[str, Any], ...] = field(default=())
    """The tools to declare with the prompt (``tool`` tasks only); the call must name ``TOOL_NAME``."""


def _apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def _arith_value(a: int, op1: str, b: int, op2: str, c: int) -> int:
    # Usual precedence: multiplication binds tighter than + and -.
    if op2 == "*" and op1 != "*":
        return _apply(a, op1, b * c)
    return _apply(_apply(a, op1, b), op2, c)


def _make(kind: str, rng: random.Random, index: int, seed: int) -> Task:
    if kind == "arithmetic":
        a, b, c = rng.randint(2, 999), rng.randint(2, 99), rng.randint(1, 999)
        op1, op2 = rng.choice("+-*"), rng.choice("+-")
        prompt = f"Compute {a} {op1} {b} {op2} {c}. Reply with the final number only."
    elif kind == "counting":
        letter = rng.choice("abcdefghijklmnopqrstuvwxyz")
        alphabet = letter * 4 + "abcdefghijklmnopqrstuvwxyz"
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(3, 8))) for _ in range(rng.randint(3, 6))]
        text = " ".join(words)
        prompt = f"How many times does the letter '{letter}' appear in \"{text}\"? Reply with the number only."
    elif kind == "ordering":
        nums = rng.sample(range(-50, 1000), rng.randint(4, 8))
        prompt = (
            "Sort these numbers in ascending order: "
            + ", ".join(map(str, nums))
            + ". Reply with the numbers separated by commas only."
        )
    elif kind == "format":
        word, times = rng.choice(_WORDS), rng.randint(2, 4)
        prompt = (
            f'Write the word "{word}" in upper case inside square brackets, {times} times, separated by single '
            "spaces. Reply with that only."
        )
    elif kind == "recall":
        keys = [f"key-{k:04x}" for k in rng.sample(range(0x1000, 0xFFFF), RECALL_RECORDS)]
        codes = [rng.randint(100000, 999999) for _ in keys]
        asked = rng.randrange(len(keys))
        records = "\n".join(f"{k}: code {c}" for k, c in zip(keys, codes, strict=True))
        prompt = (
            f"Here are {len(keys)} records.\n{records}\n\nWhat is the code for {keys[asked]}? Reply with the code only."
        )
    elif kind == "tool":
        item, quantity = rng.choice(_WORDS), rng.randint(1, 20)
        priority = rng.choice(("low", "normal", "high"))
        prompt = (
            f'Call the function {TOOL_NAME} with item "{item}", quantity {quantity} and priority "{priority}". '
            "Reply with the tool call only."
        )
        call = solve_call(prompt)
        assert call is not None  # the template matches its own regex
        return Task(f"{kind}-{seed}-{index}", kind, prompt, json.dumps(call[1], sort_keys=True), (TOOL,))
    else:  # pragma: no cover - generate() checks the kinds
        raise ValueError(kind)
    answer = solve(prompt)
    if answer is None:  # pragma: no cover - the templates above always match their own regex
        raise AssertionError(f"task template does not parse: {prompt!r}")
    return Task(id=f"{kind}-{seed}-{index}", kind=kind, prompt=prompt, answer=answer)


def generate(count: int, seed: int = 0, kinds: tuple[str, ...] = KINDS) -> list[Task]:
    """``count`` tasks cycling through ``kinds``, the same list for the same seed."""
    if count < 0:
        raise ValueError(f"task count must be >= 0, got {count}")
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown task kinds {unknown}; known: {', '.join(ALL_KINDS)}")
    rng = random.Random(seed)
    return [_make(kinds[i % len(kinds)], rng, i, seed) for i in range(count)]


def canary_round(round_index: int, seed: int = 0, kinds: tuple[str, ...] = CANARY_KINDS) -> tuple[Task, ...]:
    """One task of each of ``kinds`` for round ``round_index``: the same tasks for the same round and seed,
    other tasks in the next round."""
    rng = random.Random(f"canary:{seed}:{round_index}")
    return tuple(_make(kind, rng, i, seed * 1_000_003 + round_index) for i, kind in enumerate(kinds))


_TAIL = 2000
"""The question sits at the end of the prompt: templates are looked for in its last characters."""


def solve(prompt: str) -> str | None:
    """The exact answer if ``prompt`` ends with one of the suite's text questions, else ``None``.

    The question is looked for in the prompt's last 2,000 characters; a ``recall`` question's records
    anywhere before it."""
    tail = prompt[-_TAIL:]
    if "Reply with" not in tail:  # cheap pre-check: the simulator calls this for every request
        return None
    if m := _ARITH.search(tail):
        a, op1, b, op2, c = m.groups()
        return str(_arith_value(int(a), op1, int(b), op2, int(c)))
    if m := _COUNT.search(tail):
        return str(m.group(2).count(m.group(1)))
    if m := _ORDER.search(tail):
        return ", ".join(str(n) for n in sorted(int(x) for x in m.group(1).split(", ")))
    if m := _FORMAT.search(tail):
        return " ".join([f"[{m.group(1).upper()}]"] * int(m.group(2)))
    if m := _RECALL_Q.search(tail):
        record = re.search(rf"^{re.escape(m.group(1))}: code (\d+)$", prompt, re.MULTILINE)
        return record.group(1) if record else None
    return None


def solve_call(prompt: str) -> tuple[str, dict[str, Any]] | None:
    """The exact tool call (function name, arguments) a ``tool`` question asks for, else ``None``."""
    tail = prompt[-_TAIL:]
    if "Reply with the tool call" not in tail or (m := _TOOL.search(tail)) is None:
        return None
    name, item, quantity, priority = m.groups()
    return name, {"item": item, "quantity": int(quantity), "priority": priority}


def wrong_call(arguments: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Plausible but wrong arguments of the same schema (for simulated inaccuracy on a ``tool`` canary)."""
    out = dict(arguments)
    if rng.random() < 0.5 and isinstance(out.get("quantity"), int):
        out["quantity"] = max(1, out["quantity"] + rng.choice((-1, 1, 2)))
        if out["quantity"] == arguments["quantity"]:
            out["quantity"] += 1
    else:
        out["priority"] = rng.choice([p for p in ("low", "normal", "high") if p != out.get("priority")])
    return out


def grade_call(task: Task, name: str | None, arguments: str | None) -> bool:
    """True when a ``tool`` task was answered by a call of ``TOOL_NAME`` with exactly the asked arguments."""
    if name != TOOL_NAME or arguments is None:
        return False
    try:
        got = json.loads(arguments)
    except ValueError:
        return False
    return isinstance(got, dict) and got == json.loads(task.answer)


def wrong_answer(answer: str, rng: random.Random) -> str:
    """A plausible but wrong answer of the same form (for simulated inaccuracy)."""
    nums = [int(x) for x in _INT.findall(answer)]
    if not nums and answer != answer.lower():  # a format answer: the right words, the wrong case
        return answer.lower()
    if len(nums) <= 1:
        value = nums[0] if nums else 0
        return str(value + rng.choice((-2, -1, 1, 2)))
    i = rng.randrange(len(nums) - 1)
    nums[i], nums[i + 1] = nums[i + 1], nums[i]
    return ", ".join(map(str, nums))


def grade(task: Task, text: str) -> bool:
    """True when ``text`` ends with the exact answer (reasoning before it is allowed).

    A ``format`` answer must be the answer's last non-empty line exactly (surrounding spaces aside);
    a ``tool`` task cannot be answered in text (see :func:`grade_call`)."""
    if task.kind == "tool":
        return False
    if task.kind == "format":
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        return bool(lines) and lines[-1] == task.answer
    got = _INT.findall(text.replace("\u2212", "-"))
    want = _INT.findall(task.answer)
    if not got:
        return False
    return got[-len(want) :] == want
