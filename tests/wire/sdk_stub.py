"""An official openai SDK client whose HTTP is answered in memory: proves shapes without a network.

A plain module rather than a conftest.py: test folders have no __init__.py, so a second conftest.py
elsewhere would clash under mypy ("Duplicate module named 'conftest'").
"""

from __future__ import annotations

import httpx2
import openai


def sdk_client(status: int, body: bytes, content_type: str = "application/json") -> openai.OpenAI:
    """A client whose every request gets `status` and `body`; use it as a context manager."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": content_type}, content=body)

    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://upstream.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
