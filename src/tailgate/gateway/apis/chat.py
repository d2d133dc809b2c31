"""``POST /v1/chat/completions``: OpenAI's chat API, the gateway's first (gateway/apis/openai_family.py)."""

from __future__ import annotations

from tailgate.gateway.api_handler import register
from tailgate.gateway.apis.openai_family import OpenAIApi

API = register(OpenAIApi("chat", "/chat/completions", "chat", judged=True))  # answer quality reads chat answers
