"""Re-vendor the subset of OpenAI's published OpenAPI schema that the conformance test validates against.

    git -C openai-openapi show COMMIT:openapi.json > /tmp/openapi.json
    python tests/conformance/vendor_openapi.py /tmp/openapi.json COMMIT

Reads ``openapi.json`` of https://github.com/openai/openai-openapi at COMMIT and writes
``openai_openapi_subset.json`` beside this file: the named component schemas and everything they
reference (``#/components/schemas/...``), unchanged, plus where they came from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "CreateEmbeddingResponse",
    "ListModelsResponse",
    "ErrorResponse",
    "Response",
    "ResponseStreamEvent",
)
OUT = Path(__file__).with_name("openai_openapi_subset.json")


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def main(source: str, commit: str) -> None:
    spec = json.loads(Path(source).read_text(encoding="utf-8"))
    schemas = spec["components"]["schemas"]
    keep: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo.extend(found - keep)
    subset = {
        "source": {
            "repository": "https://github.com/openai/openai-openapi",
            "commit": commit,
            "path": "openapi.json",
            "openapi": spec["openapi"],
            "api_version": spec["info"]["version"],
            "roots": list(ROOTS),
        },
        "components": {"schemas": {name: schemas[name] for name in sorted(keep)}},
    }
    OUT.write_text(json.dumps(subset, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(keep)} schemas from {commit}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
