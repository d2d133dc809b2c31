"""tailgate: keep LLM users from queueing.

Measure OpenAI-compatible providers honestly and route between them by measured tail latency.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
