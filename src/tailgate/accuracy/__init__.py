"""The verifiable accuracy suite (generated tasks with exact answers)."""

from tailgate.accuracy.tasks import KINDS, Task, generate, grade, solve, wrong_answer

__all__ = ["KINDS", "Task", "generate", "grade", "solve", "wrong_answer"]
