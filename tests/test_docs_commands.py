"""Docs that cannot drift: every ``tailgate …`` command line in README.md, README.zh-CN.md and docs/ names
subcommands and flags the CLI has, and every YAML block that is a whole gateway config passes
``tailgate config check``.

Commands are taken from fenced code blocks (a line, with its ``\\`` continuations, that runs ``tailgate``,
``.venv/bin/tailgate`` or ``/opt/tailgate/bin/tailgate``) and from inline code spans that start with
``tailgate ``. ``…`` / ``...`` and ``a|b`` alternatives are understood. The checker is shown failing on
planted lines in ``test_the_checker_sees_planted_drift``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from tailgate.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "README.zh-CN.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^```([\w-]*)\s*$")
# ``tailgate`` (or a path to it) in command position: the line's start, or after && || ; | ( $( .
_RUNS = re.compile(r"(?:^\s*|(?:&&|\|\||;|\||\(|\$\()\s*)((?:[\w.~/-]*/)?tailgate)\s+(?=[a-z-])")
_INLINE = re.compile(r"`(tailgate [^`]+)`")
_ELLIPSIS = {"…", "...", "[...]", "[…]"}


@dataclass(frozen=True)
class Command:
    where: str
    """file:line"""
    text: str


@dataclass(frozen=True)
class Block:
    where: str
    lang: str
    text: str


def _blocks(path: Path, root: Path = ROOT) -> list[Block]:
    out: list[Block] = []
    lang: str | None = None
    start = 0
    lines: list[str] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = _FENCE.match(line.strip())
        if fence and lang is None:
            lang, start, lines = fence.group(1), n, []
        elif line.strip() == "```" and lang is not None:
            out.append(Block(f"{path.relative_to(root)}:{start}", lang, "\n".join(lines)))
            lang = None
        elif lang is not None:
            lines.append(line)
    return out


def commands_in(text: str, where: str, *, fenced: bool) -> list[Command]:
    """The ``tailgate …`` commands in a code block (``fenced``) or in prose (inline code spans)."""
    found: list[Command] = []
    if not fenced:  # a span may wrap onto the next line of the paragraph
        for span in _INLINE.finditer(text):
            n = text.count("\n", 0, span.start()) + 1
            found.append(Command(f"{where}:{n}", " ".join(span.group(1).split())))
        return found
    joined: list[tuple[int, str]] = []
    pending = ""
    for n, line in enumerate(text.splitlines(), 1):
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        joined.append((n, pending))
        pending = ""
    for n, line in joined:
        code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        if m := _RUNS.search(code):
            found.append(Command(f"{where}:+{n}", "tailgate " + code[m.end() :].strip()))
    return found


def all_commands() -> list[Command]:
    out: list[Command] = []
    for path in DOCS:
        rel = str(path.relative_to(ROOT))
        for block in _blocks(path):
            if block.lang in ("", "bash", "sh", "console", "shell"):
                out += commands_in(block.text, block.where, fenced=True)
        text = path.read_text(encoding="utf-8")
        prose = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        out += commands_in(prose, rel, fenced=False)
    return out


def _tokens(text: str) -> list[str]:
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose: check what comes before it
        tokens = text.split()
    out = []
    for token in tokens:
        if token in ("|", "||", "&&", ";", "&", ">", ">>", "2>&1") or token.startswith((">", "|")):
            break
        out.append(token)
    return out


def _option(command: click.Command, name: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def problems_of(cmd: Command) -> list[str]:
    """What in ``cmd`` the CLI does not have (an unknown subcommand or flag), as ``file:line: message``."""
    tokens = _tokens(cmd.text)
    assert tokens[0] == "tailgate"
    current: click.Command = main
    path = "tailgate"
    out: list[str] = []
    i = 1
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in _ELLIPSIS or token.endswith(("…", "...")):
            break  # "tailgate bench …": the rest is elided
        if token.startswith("-") and len(token) > 1:
            name = token.split("=", 1)[0]
            option = _option(current, name)
            if option is None:
                if name not in ("-h", "--help") and not (current is main and name == "--version"):
                    out.append(f"{cmd.where}: `{path}` has no option {name} (in `{cmd.text}`)")
                continue
            if not option.is_flag and not option.count and "=" not in token:
                i += 1  # its value
            continue
        if isinstance(current, click.Group):
            names = token.split("|")
            sub = [current.commands.get(n) for n in names]
            if any(s is None for s in sub):
                out.append(f"{cmd.where}: `{path}` has no command {token!r} (in `{cmd.text}`)")
                break
            first = sub[0]
            assert first is not None
            current, path = first, f"{path} {names[0]}"
            continue
        # a positional argument: nothing to check
    return out


def test_every_documented_command_and_flag_exists() -> None:
    """Each `tailgate …` line of the README (both languages) and docs/ uses subcommands and flags the CLI has."""
    commands = all_commands()
    assert len(commands) >= 80, len(commands)  # the extraction itself works
    problems = [p for cmd in commands for p in problems_of(cmd)]
    assert problems == [], "\n".join(problems)


PLANTED = """\
Run `tailgate serve --config gw.yaml --no-such-flag` or `tailgate keys create --id a --colour red`.

```bash
tailgate bench --target a=http://x/v1 \\
  --concurency 1,10          # a typo on a continuation line
tailgate nosuch --x 1
.venv/bin/tailgate config chek gw.yaml
tailgate keys create|lisst --config gw.yaml
tailgate mock --preset instant --port 9001   # this one is fine
```
"""


def test_the_checker_sees_planted_drift(tmp_path: Path) -> None:
    """Five planted drifts (an unknown flag in prose, on a continuation line and after a subcommand, an
    unknown command and an unknown alternative) are each reported; the correct line is not."""
    doc = tmp_path / "planted.md"
    doc.write_text(PLANTED, encoding="utf-8")
    found = commands_in(PLANTED.split("```")[0], "planted.md", fenced=False)
    for block in _blocks(doc, tmp_path):
        found += commands_in(block.text, block.where, fenced=True)
    problems = [p for cmd in found for p in problems_of(cmd)]
    flagged = " ".join(problems)
    for needle in ("--no-such-flag", "--colour", "--concurency", "'nosuch'", "'chek'", "'create|lisst'"):
        assert needle in flagged, (needle, problems)
    assert len(problems) == 6, problems
    assert not any("mock" in p for p in problems)


# -- YAML blocks that are whole gateway configs ------------------------------------------------------------


def gateway_blocks() -> list[Block]:
    """YAML blocks with both ``providers`` and ``models`` at the top level: whole gateway configs."""
    out = []
    for path in DOCS:
        for block in _blocks(path):
            if block.lang not in ("yaml", "yml"):
                continue
            try:
                data = yaml.safe_load(block.text)
            except yaml.YAMLError:
                continue
            if isinstance(data, dict) and "providers" in data and "models" in data:
                out.append(block)
    return out


def test_every_whole_config_in_the_docs_passes_config_check(tmp_path: Path) -> None:
    """`tailgate config check` accepts every documented whole config (each ${VAR} set to a dummy value)."""
    from tailgate.config.check import check_file

    blocks = gateway_blocks()
    assert len(blocks) >= 3, [b.where for b in blocks]
    failures = []
    for n, block in enumerate(blocks):
        path = tmp_path / f"block{n}.yaml"
        path.write_text(block.text, encoding="utf-8")
        env = dict.fromkeys(re.findall(r"\$\{(\w+)", block.text), "dummy-value-0123456789")
        try:
            check_file(path, env=env)
        except Exception as exc:
            failures.append(f"{block.where}: {exc}")
    assert failures == [], "\n".join(failures)


@pytest.mark.parametrize("broken", ["routes: [{provider: nope, model: x}]", "routs: []"])
def test_config_check_of_the_docs_would_see_a_broken_block(tmp_path: Path, broken: str) -> None:
    """The config check above can fail: a documented config with a planted mistake is refused."""
    from tailgate.config.check import check_file
    from tailgate.config.loader import ConfigError

    path = tmp_path / "broken.yaml"
    path.write_text(f"providers:\n  p: {{base_url: 'http://127.0.0.1:9/v1'}}\nmodels:\n  m: {{{broken}}}\n", "utf-8")
    with pytest.raises(ConfigError):
        check_file(path, env={})


# Relative links and their anchors: tests/test_docs_links.py.


_KEY_PLACEHOLDER = re.compile(r"(?:ANTHROPIC_AUTH_TOKEN|ANTHROPIC_API_KEY)=(\S+)")


def test_the_docs_key_placeholders_have_the_prefix_keys_create_prints(tmp_path: Path) -> None:
    """Every tailgate key shown in the docs (`ANTHROPIC_AUTH_TOKEN=…`) starts as `tailgate keys create`'s key
    does (the README showed `tg-...` while the command prints `sk-…`)."""
    config = tmp_path / "gw.yaml"
    config.write_text(
        "providers:\n  p:\n    base_url: http://127.0.0.1:9/v1\n"
        f"models:\n  chat:\n    routes: [{{provider: p, model: m}}]\nledger:\n  path: '{tmp_path / 't.db'}'\n"
    )
    result = CliRunner().invoke(main, ["keys", "create", "--config", str(config), "--id", "a"])
    assert result.exit_code == 0, result.output
    secret = next(line for line in result.stdout.splitlines() if re.fullmatch(r"[a-z]+-\S{20,}", line))
    prefix = secret.split("-", 1)[0] + "-"
    shown = [(doc.name, m.group(1)) for doc in DOCS for m in _KEY_PLACEHOLDER.finditer(doc.read_text())]
    assert len(shown) >= 4  # README, README.zh-CN, docs/gateway.md (both variables)
    assert [s for s in shown if not s[1].startswith(prefix)] == []
