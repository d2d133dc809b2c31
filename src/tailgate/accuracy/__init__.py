"""The verifiable accuracy suite and the canary set (generated tasks with exact answers)."""

from tailgate.accuracy.tasks import (
    CANARY_KINDS,
    KINDS,
    TEXT_CANARY_KINDS,
    TOOL,
    TOOL_NAME,
    Task,
    canary_round,
    generate,
    grade,
    grade_call,
    solve,
    solve_call,
    wrong_answer,
    wrong_call,
)

__all__ = [
    "CANARY_KINDS",
    "KINDS",
    "TEXT_CANARY_KINDS",
    "TOOL",
    "TOOL_NAME",
    "Task",
    "canary_round",
    "generate",
    "grade",
    "grade_call",
    "solve",
    "solve_call",
    "wrong_answer",
    "wrong_call",
]
