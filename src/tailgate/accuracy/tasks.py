"""The verifiable task suite: generated questions with exact answers, no dataset download.

Three kinds, each a fixed English template so that any model can answer it and a grader can check the
answer without judgement:

* ``arithmetic``: ``Compute 347 * 29 + 18. Reply with the final number only.``
* ``counting``:   ``How many times does the letter 'r' appear in "rbrrq xr"? Reply with the number only.``
* ``ordering``:   ``Sort these numbers in ascending order: 42, 7, 19. Reply with the numbers separated by
  commas only.``

:func:`solve` recognises the templates in a prompt and computes the exact answer; the simulator uses it
to answer correctly with a configured probability, and bench/monitor use :func:`grade` to score real
providers. The suite is deterministic for a seed, so two runs (or two providers) get the same questions.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

KINDS = ("arithmetic", "counting", "ordering")

_ARITH = re.compile(r"Compute (-?\d+) ([+*-]) (-?\d+) ([+*-]) (-?\d+)\. Reply with the final number only\.")
_COUNT = re.compile(r"How many times does the letter '([a-z])' appear in \"([a-z ]+)\"\? Reply with the number only\.")
_ORDER = re.compile(
    r"Sort these numbers in ascending order: (-?\d+(?:, -?\d+)+)\. "
    r"Reply with the numbers separated by commas only\."
)
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True, slots=True)
class Task:
    """One question: ``prompt`` goes to the model as the user message; ``answer`` is exact."""

    id: str
    kind: str
    prompt: str
    answer: str


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
    else:
        nums = rng.sample(range(-50, 1000), rng.randint(4, 8))
        prompt = (
            "Sort these numbers in ascending order: "
            + ", ".join(map(str, nums))
            + ". Reply with the numbers separated by commas only."
        )
    answer = solve(prompt)
    if answer is None:  # pragma: no cover - the templates above always match their own regex
        raise AssertionError(f"task template does not parse: {prompt!r}")
    return Task(id=f"{kind}-{seed}-{index}", kind=kind, prompt=prompt, answer=answer)


def generate(count: int, seed: int = 0, kinds: tuple[str, ...] = KINDS) -> list[Task]:
    """``count`` tasks cycling through ``kinds``, the same list for the same seed."""
    if count < 0:
        raise ValueError(f"task count must be >= 0, got {count}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown task kinds {unknown}; known: {', '.join(KINDS)}")
    rng = random.Random(seed)
    return [_make(kinds[i % len(kinds)], rng, i, seed) for i in range(count)]


def solve(prompt: str) -> str | None:
    """The exact answer if ``prompt`` contains one of the suite's questions, else ``None``."""
    if "Reply with" not in prompt:  # cheap pre-check: the simulator calls this for every request
        return None
    if m := _ARITH.search(prompt):
        a, op1, b, op2, c = m.groups()
        return str(_arith_value(int(a), op1, int(b), op2, int(c)))
    if m := _COUNT.search(prompt):
        return str(m.group(2).count(m.group(1)))
    if m := _ORDER.search(prompt):
        return ", ".join(str(n) for n in sorted(int(x) for x in m.group(1).split(", ")))
    return None


def wrong_answer(answer: str, rng: random.Random) -> str:
    """A plausible but wrong answer of the same form (for simulated inaccuracy)."""
    nums = [int(x) for x in _INT.findall(answer)]
    if len(nums) <= 1:
        value = nums[0] if nums else 0
        return str(value + rng.choice((-2, -1, 1, 2)))
    i = rng.randrange(len(nums) - 1)
    nums[i], nums[i + 1] = nums[i + 1], nums[i]
    return ", ".join(map(str, nums))


def grade(task: Task, text: str) -> bool:
    """True when ``text`` ends with the exact answer (reasoning before it is allowed)."""
    got = _INT.findall(text.replace("\u2212", "-"))
    want = _INT.findall(task.answer)
    if not got:
        return False
    return got[-len(want) :] == want
