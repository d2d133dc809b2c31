"""Print the SHA-256 of what the lock files are made from: pyproject.toml's dependency tables only.

The lock files carry this digest in their header (``# deps-sha256: …``); ``scripts/test`` and
``scripts/demo`` compare it with pyproject.toml to tell a stale lock from a current one. Editing any
other part of pyproject.toml (tool settings, markers) does not make the lock stale.
Standard library only: it runs before any virtual environment exists.
"""

import hashlib
import json
import sys
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
project = data.get("project", {})
inputs = {
    "requires-python": project.get("requires-python"),
    "dependencies": project.get("dependencies", []),
    "optional-dependencies": project.get("optional-dependencies", {}),
    "build-system": data.get("build-system", {}).get("requires", []),
}
if len(sys.argv) > 1 and sys.argv[1] == "--build-requires":
    print("\n".join(inputs["build-system"]))
else:
    print(hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest())
