"""Fixtures for the wire tests: an official openai SDK client whose HTTP goes to an in-memory handler."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx2
import openai
import pytest

Handler = Callable[[httpx2.Request], httpx2.Response]
ClientFactory = Callable[[Handler], openai.OpenAI]


@pytest.fixture
def sdk_client() -> Iterator[ClientFactory]:
    """Build SDK clients that never touch the network: every request is answered by `handler`."""
    clients: list[openai.OpenAI] = []

    def make(handler: Handler) -> openai.OpenAI:
        client = openai.OpenAI(
            api_key="sk-test",
            base_url="http://upstream.test/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
            max_retries=0,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def respond(status: int, body: bytes, content_type: str = "application/json") -> Handler:
    """A handler that answers every request with the same status and body."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": content_type}, content=body)

    return handler


@pytest.fixture
def responder() -> Callable[..., Handler]:
    """Expose `respond` to tests (conftest modules are not importable without packages)."""
    return respond
