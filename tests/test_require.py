"""tests/_require.py: a missing component skips a test on a developer's machine and fails it under CI=true.

The checks plant the absence themselves: a program made for the test in a folder that is on PATH or not,
and ``TAILGATE_TEST_HIDE`` for a component that PATH cannot hide (redis-server in /usr/bin).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PROBE = """
from _require import require_program, require_redis_server

def test_needs_the_program():
    assert require_program("tg-planted-tool", "made by tests/test_require.py").endswith("tg-planted-tool")

def test_needs_redis_server():
    assert require_redis_server()
"""


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A folder holding an executable ``tg-planted-tool`` (not on PATH until a test puts it there)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "tg-planted-tool"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return folder


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, ci: str | None) -> pytest.RunResult:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_probe=PROBE)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rsf", "-k", "needs_the_program")


@pytest.mark.parametrize("ci", [None, "false"])
def test_a_missing_program_skips_outside_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, planted: Path, ci: str | None
) -> None:
    """Without CI=true, a program absent from PATH skips the test and says what is missing and how to get it."""
    result = _run(pytester, monkeypatch, ci=ci)
    result.assert_outcomes(skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*'tg-planted-tool' (not on PATH) is missing (made by tests/test_require.py)*"])


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_program_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, planted: Path, ci: str
) -> None:
    """Under CI=true the same absence is a failure whose message names the program and says why it fails."""
    result = _run(pytester, monkeypatch, ci=ci)
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*CI=true and the program 'tg-planted-tool' (not on PATH) is missing*not a skip*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("ci", [None, "true"])
def test_a_present_program_passes_either_way(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, planted: Path, ci: str | None
) -> None:
    """With the planted program on PATH the test runs and passes, in CI or not (the helper returns its path)."""
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ['PATH']}")
    _run(pytester, monkeypatch, ci=ci).assert_outcomes(passed=1, deselected=1)


@pytest.mark.parametrize(("ci", "outcome"), [(None, "skipped"), ("true", "failed")])
def test_a_hidden_redis_server_skips_or_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None, outcome: str
) -> None:
    """TAILGATE_TEST_HIDE=redis-server makes redis-server count as missing: a skip, or under CI=true a failure."""
    monkeypatch.setenv("TAILGATE_TEST_HIDE", "wrk, redis-server")
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_probe=PROBE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rsf", "-k", "needs_redis_server")
    result.assert_outcomes(**{outcome: 1, "deselected": 1})
    result.stdout.fnmatch_lines(["*redis-server is missing (apt-get install redis-server*"])


_OWN_SKIP = re.compile(r"pytest\.skip\(|skipif\(|importorskip\(|pytest\.mark\.skip\b")


def test_no_test_skips_around_require() -> None:
    """No test file skips by itself (``pytest.skip``, ``skipif``, ``importorskip``) except for the platform: a
    missing component goes through tests/_require.py, so under CI=true it fails instead of staying green."""
    tests = Path(__file__).resolve().parent
    own = [
        f"{path.relative_to(tests)}:{n}: {line.strip()}"
        for path in sorted(tests.rglob("*.py"))
        if path.name != "_require.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OWN_SKIP.search(line) and "sys.platform" not in line
    ]
    assert own == []
