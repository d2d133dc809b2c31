"""``POST /v1/completions``: OpenAI's legacy completions API (gateway/apis/openai_family.py). Its reservation
counts ``best_of`` answers where larger than ``n`` (estimate.output_multiplier)."""

from __future__ import annotations

from tailgate.gateway.api_handler import register
from tailgate.gateway.apis.openai_family import OpenAIApi

API = register(OpenAIApi("completions", "/completions", "completions"))
