"""``POST /v1/embeddings``: generates nothing (its reservation is the prompt alone) and keeps no prompt cache
(routing affinity does not apply). Otherwise as chat (gateway/apis/openai_family.py)."""

from __future__ import annotations

from tailgate.gateway.api_handler import register
from tailgate.gateway.apis.openai_family import OpenAIApi

API = register(OpenAIApi("embeddings", "/embeddings", "embeddings", generates=False))
