"""The verifiable task suite, and the simulator answering it with its configured accuracy."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import SimFactory
from tailgate.accuracy import KINDS, Task, generate, grade, solve, wrong_answer


def test_suite_is_deterministic_and_cycles_kinds() -> None:
    """The same seed gives the same tasks; kinds alternate; ids are unique."""
    a, b = generate(30, seed=9), generate(30, seed=9)
    assert a == b
    assert a != generate(30, seed=10)
    assert [t.kind for t in a[:3]] == list(KINDS)
    assert len({t.id for t in a}) == 30


@given(st.integers(min_value=0, max_value=10_000))
def test_solve_recovers_every_generated_answer(seed: int) -> None:
    """solve() recognises each template and computes exactly the generated answer."""
    for task in generate(6, seed=seed):
        assert solve(task.prompt) == task.answer
        assert solve("Please answer: " + task.prompt + "\nThanks") == task.answer


def test_arithmetic_respects_precedence() -> None:
    """Multiplication binds tighter than + and -."""
    assert solve("Compute 2 + 3 * 4. Reply with the final number only.") == "14"
    assert solve("Compute 2 * 3 - 4. Reply with the final number only.") == "2"
    assert solve("Compute 10 - 3 - 4. Reply with the final number only.") == "3"


@given(st.integers(min_value=0, max_value=10_000))
def test_grade_accepts_right_and_rejects_wrong(seed: int) -> None:
    """grade() accepts the answer (even after reasoning) and rejects the simulator's wrong answers."""
    rng = random.Random(seed)
    for task in generate(3, seed=seed):
        assert grade(task, task.answer)
        assert grade(task, f"Let me think. 1, 2... The answer is {task.answer}")
        assert not grade(task, wrong_answer(task.answer, rng))
        assert not grade(task, "I don't know")


def test_non_task_prompts_are_not_recognised() -> None:
    """Ordinary prompts are not mistaken for tasks."""
    assert solve("Reply with a poem about 3 + 4.") is None
    assert solve("hello") is None
    with pytest.raises(ValueError, match="unknown task kinds"):
        generate(1, kinds=("poetry",))


@pytest.mark.parametrize(("accuracy", "low", "high"), [(1.0, 40, 40), (0.0, 0, 0), (0.5, 10, 30)])
async def test_simulator_answers_with_configured_accuracy(
    sim: SimFactory, oai: Callable[..., Any], accuracy: float, low: int, high: int
) -> None:
    """A provider with accuracy p answers about p of the suite correctly (exactly, at 0 and 1)."""
    p = await sim("instant", engine={"accuracy": accuracy}, seed=4)
    client = oai(p.url)
    tasks: list[Task] = generate(40, seed=1)
    right = 0
    for task in tasks:
        resp = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task.prompt}])
        assert resp.choices[0].finish_reason == "stop"
        right += grade(task, resp.choices[0].message.content or "")
    assert low <= right <= high
