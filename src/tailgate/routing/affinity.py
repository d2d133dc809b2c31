"""Conversation affinity: keep a conversation on one route so its provider's prompt cache stays warm.

Providers cache prompt prefixes per account (DeepSeek's context cache, Bailian's implicit cache): a turn whose
prefix is cached costs 10–20 % of the input price and skips that prefill. A per-request split sends the next
turn of a conversation to the other route 1 − Σ share² of the time (32 % at 80/20), where it misses. Here:

- :func:`affinity_key`: a pure function over (headers, parsed body) → a 64-bit key and its source, from the
  first configured source that has one: a session header (``x-session-id``, else the coding agents' own:
  Claude Code's ``x-claude-code-session-id``, the session id in Codex's ``x-codex-turn-metadata``),
  ``prompt_cache_key``, ``user`` (the Anthropic Messages body's ``metadata.user_id``, keyed on the session id
  Claude Code puts in it, not its device id), else a hash of the conversation's *stable prefix* — the
  system prompt and the first user message (OpenAI chat, Anthropic Messages, Responses ``instructions`` /
  ``input``), or the leading characters of a bare prompt (completions, a Responses string input). Bytes are
  hashed (CRC-32, spread to 64 bits), never tokenized; a part longer than ``prefix_chars`` is hashed by its
  head and tail (half of ``prefix_chars`` each) and its length, so the cost is bounded whatever the prompt's size.
- :class:`Affinity`: weighted rendezvous hashing (HRW) over the routes a policy admits for the request:
  each route scores ``-w / ln(u)`` with ``u`` a hash of (key, route) in (0, 1), and the routes go in
  descending score. P(route first) = w ÷ Σw over the candidates, so the population of conversations keeps
  the split; every replica computes the same order from the key alone (no shared state); a route that
  leaves moves only the conversations it had (the others' top score is unchanged), and a weight change moves
  only the conversations whose top score changes.
- Bounded load (consistent hashing with bounded loads, Mirrokni, Thorup & Zadimoghaddam 2018): over the last
  ``window`` affinity assignments of the alias among the same candidate routes, a route whose count exceeds
  ``(share + epsilon) × n`` is passed over for the next in HRW order. So a hot key (one prefix carrying much
  of the traffic) never drags more than ``share + epsilon`` of the alias's affinity traffic onto one route
  (+ 1 / window: the assignment that crosses it). Only a *hot* key is passed on: one with at least
  ``epsilon / 2`` of the window's assignments (50 of 1,000 at the defaults). A route above its bound by chance
  alone (many ordinary conversations, each a few turns) keeps them: moving an ordinary conversation would cost
  its cache for nothing, and the split of ordinary conversations is right in expectation already. The bound
  applies once ``window // 4`` assignments are counted.
  The window is per gateway process: replicas agree on every key except while one of them passes a hot key on.
- A tenant's share (:class:`_Share`): per tenant key, its last ``window`` affinity placements among the same
  candidate routes (a byte each). A request whose first route would put the tenant above
  ``(share + epsilon) × n + TENANT_SLACK`` of them there goes to the first route in its HRW order still under
  its share (with two routes one always is). So a tenant cannot concentrate its traffic on one route by
  choosing session ids that hash there; a tenant with many ordinary conversations is within the bound by chance
  and nothing of it moves. The cost falls on a tenant whose heavy traffic is one or two conversations: its
  excess turns go cold elsewhere.
  Per process, no Redis call: the bound is additive, so across N replicas the tenant's fleet-wide count on a
  route stays within ``(share + epsilon) × n + N × TENANT_SLACK``.

The upstream key within a provider is picked by the same key (``KeyPool.pick``: caches are per account).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from tailgate.routing.route import Route, mix64, route_hash

__all__ = [
    "SOURCES",
    "Affinity",
    "AffinitySettings",
    "Source",
    "Sticky",
    "affinity_key",
    "hrw_order",
    "prefix_key",
    "route_hash",
    "stable_prefix",
]

Source = Literal["header", "prompt_cache_key", "user", "prefix"]
SOURCES: Final[tuple[Source, ...]] = ("header", "prompt_cache_key", "user", "prefix")
HEADER: Final = "x-session-id"
CLAUDE_CODE_HEADER: Final = "x-claude-code-session-id"
"""Claude Code's session id (a UUID, the same as the ``session_id`` in its ``metadata.user_id``)."""
CODEX_HEADER: Final = "x-codex-turn-metadata"
"""Codex CLI's per-turn JSON; its ``session_id`` (else ``thread_id``, ``conversation_id``) keys the session."""
_SESSION_FIELDS: Final = ("session_id", "thread_id", "conversation_id")
_SESSION_PATTERNS: Final = tuple(re.compile(rf'"{f}"\s*:\s*"([^"\\]+)"') for f in _SESSION_FIELDS)
_MASK: Final = (1 << 64) - 1
_TWO64: Final = float(1 << 64)
_GOLDEN: Final = 0x9E3779B97F4A7C15
TENANT_SLACK: Final = 8
"""Placements a tenant may have on a route beyond ``(share + epsilon) × n``: its first few requests go by their
key alone (a new tenant, a handful of requests, is not bounded)."""
_TENANTS: Final = 10_000
"""Tenants remembered per set of candidate routes; past it the table starts over (the bound starts afresh)."""


@dataclass(frozen=True, slots=True)
class AffinitySettings:
    """``routing.affinity`` resolved for one alias (docs/config.md)."""

    enabled: bool = True
    sources: tuple[Source, ...] = SOURCES
    prefix_chars: int = 512
    """Characters of each stable-prefix part hashed; a longer part: half from its head, half from its tail."""
    epsilon: float = 0.1
    """Hot-key bound: a route carries at most its share + epsilon of the alias's affinity assignments; and of
    each tenant key's (:class:`_Share`)."""
    window: int = 1000
    """Recent affinity assignments (per alias, per process) the bound is measured over."""
    min_tokens: float = 64.0
    """Prompts estimated below this are split per request as without affinity (the cache minimum)."""


def _digest(text: str) -> int:
    """64 well-spread bits of ``text``: CRC-32 of its bytes and its length, through splitmix64's finalizer.
    CRC-32 runs at ~1.5 GB/s where blake2b runs at ~0.4 (docs/benchmarks.md, affinity); a routing key needs
    spread, not secrecy: two conversations whose keys collide share a route, nothing else."""
    return _mix((zlib.crc32(_bytes(text)) << 32) | (len(text) & 0xFFFFFFFF))


def _bytes(text: str) -> bytes:
    """``text``'s bytes for hashing: ASCII as is (no copy in CPython), other text as UTF-16 (two bytes a
    character, half the work of UTF-8 for CJK text). The same text gives the same bytes in every process."""
    return text.encode() if text.isascii() else text.encode("utf-16-le", "surrogatepass")


def _clip(text: str, limit: int) -> str:
    """``text`` whole when short, else its head and tail (``limit`` characters in all; the caller hashes its
    length beside them)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + text[-half:]


def _text(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a content list (OpenAI ``text`` / ``input_text``,
    Anthropic ``text`` blocks), joined; other parts (images, tool results) by their type only."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict):
                t = part.get("text")
                parts.append(t if isinstance(t, str) else str(part.get("type", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "\x1e".join(parts) if parts else None
    return None


def _first_user(messages: Any) -> tuple[str, str | None]:
    """(system text of the messages before the first user message, the first user message's text)."""
    if not isinstance(messages, list):
        return "", None
    system = ""
    for m in messages:
        if type(m) is not dict:
            continue
        role = m.get("role")
        if role == "user":
            content = m.get("content")
            return system, content if type(content) is str else _text(content)
        if role == "system" or role == "developer":
            content = m.get("content")
            text = content if type(content) is str else _text(content)
            if text is not None:
                system = f"{system}\x1e{text}" if system else text
    return system, None


def _prefix(body: Mapping[str, Any], prefix_chars: int) -> tuple[str, str] | None:
    """(system text, first user text) of the conversation, unclipped, or None when the body has none."""
    system = ""
    first: str | None = None
    if "messages" in body:
        system, first = _first_user(body.get("messages"))
        top = body.get("system")  # Anthropic: a string or a list of text blocks
        if top is not None and (top := _text(top)):
            system = f"{top}\x1e{system}" if system else top
    elif "input" in body:  # Responses
        instructions = body.get("instructions")
        system = instructions if isinstance(instructions, str) else ""
        given = body.get("input")
        if isinstance(given, str):
            first = given[:prefix_chars]  # a bare prompt grows at its end: its head is what stays
        else:
            inner, first = _first_user(given)
            system = f"{system}\x1e{inner}" if inner else system
    elif "prompt" in body:  # completions: a prompt (or a batch) that grows at its end
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            first = prompt[:prefix_chars]
    if first is None and not system:
        return None
    return system, first or ""


def stable_prefix(body: Mapping[str, Any], prefix_chars: int) -> str | None:
    """What stays the same across a conversation's turns, clipped (see the module docstring), as text with the
    parts' lengths, or None when the body has nothing to hash. OpenAI chat (``messages``), Anthropic Messages
    (``system`` + ``messages``), Responses (``instructions`` + ``input``), completions (``prompt``). For reading
    and tests: :func:`prefix_key` hashes the same parts without building this string."""
    got = _prefix(body, prefix_chars)
    if got is None:
        return None
    system, first = got
    return f"{len(system)}\x00{_clip(system, prefix_chars)}\x1f{len(first)}\x00{_clip(first, prefix_chars)}"


def prefix_key(body: Mapping[str, Any], prefix_chars: int) -> int | None:
    """The 64-bit key of :func:`stable_prefix`'s parts: CRC-32 over each clipped part's bytes (:func:`_bytes`)
    in turn, with both parts' lengths, through splitmix64's finalizer. No joined string, no UTF-8 of CJK text."""
    got = _prefix(body, prefix_chars)
    if got is None:
        return None
    system, first = got
    ls, lf = len(system), len(first)
    if ls > prefix_chars:
        half = prefix_chars // 2
        system = system[:half] + system[-half:]
    if lf > prefix_chars:
        half = prefix_chars // 2
        first = first[:half] + first[-half:]
    crc = zlib.crc32(system.encode() if system.isascii() else system.encode("utf-16-le", "surrogatepass"))
    crc = zlib.crc32(first.encode() if first.isascii() else first.encode("utf-16-le", "surrogatepass"), crc)
    return _mix((crc << 32) | ((ls * 0x10001 + lf) & 0xFFFFFFFF))


def _json_session(text: str) -> str | None:
    """The session id inside a JSON object's text (:data:`_SESSION_FIELDS`, first found), else None. A regular
    expression over the text, not a JSON parse: ids are plain strings, and a parse costs 2 µs a request."""
    for pattern in _SESSION_PATTERNS:
        found = pattern.search(text)
        if found is not None:
            return found.group(1)
    return None


def _header(headers: Mapping[str, str]) -> str | None:
    """The session header's value: ``x-session-id``, else Claude Code's, else the id in Codex's turn metadata."""
    value = headers.get(HEADER)
    if value:
        return value
    value = headers.get(CLAUDE_CODE_HEADER)
    if value:
        return value
    meta = headers.get(CODEX_HEADER)
    return _json_session(meta) if meta else None


def _user(body: Mapping[str, Any]) -> Any:
    """``user``, else Anthropic's ``metadata.user_id`` — by its session id where Claude Code put one there: a
    JSON string with ``device_id`` and ``session_id`` (2.x), or ``user_<hash>_account_<uuid>_session_<uuid>``
    (1.x). The device id is the same for every session of a machine, so keying on it would pin them all."""
    user = body.get("user")
    if user is None:
        meta = body.get("metadata")  # Anthropic Messages: metadata.user_id
        if isinstance(meta, dict):
            user = meta.get("user_id")
            if isinstance(user, str):
                if user.startswith("{"):
                    return _json_session(user) or user
                cut = user.rfind("_session_")
                if cut >= 0 and cut + 9 < len(user):
                    return user[cut + 9 :]
    return user


def affinity_key(
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    sources: Sequence[Source] = SOURCES,
    prefix_chars: int = 512,
) -> tuple[int, Source] | None:
    """The request's affinity key (64 bits, the same in every process) and where it came from, or None when
    no configured source has one. Pure: headers are looked up lower-case (both servers' mappings answer so)."""
    for source in sources:
        value: Any
        if source == "header":
            value = _header(headers)
        elif source == "prompt_cache_key":
            value = body.get("prompt_cache_key")
        elif source == "user":
            value = _user(body)
        else:
            key = prefix_key(body, prefix_chars)
            if key is not None:
                return key, source
            continue
        if isinstance(value, str) and value:
            return _digest(value), source
    return None


BORDER_TOKENS: Final = 256
"""Above the cache minimum by less than this (the gateway's estimate, body bytes / 4, counts the JSON around the
prompt too), the prompt's own text is counted (:func:`prompt_text_tokens`) before affinity applies."""


def prompt_text_tokens(body: Mapping[str, Any]) -> float:
    """The prompt's text in tokens, estimated as its UTF-8 bytes / 4 (what the gateway's own estimate assumes):
    every message's text (OpenAI, Anthropic with its ``system``, Responses with ``instructions``) or the
    completions ``prompt``. Walks every message: used only near the cache minimum."""
    size = 0
    parts: list[Any] = [body.get("system"), body.get("instructions"), body.get("prompt")]
    for key in ("messages", "input"):
        items = body.get(key)
        if isinstance(items, list):
            parts += [m.get("content") if isinstance(m, dict) else m for m in items]
        else:
            parts.append(items)
    for part in parts:
        if part is None:
            continue
        text = _text(part) if not isinstance(part, str) else part
        if text:
            size += len(text.encode("utf-8", "surrogatepass"))
    return size / 4


_mix = mix64


def _score(key: int, salt: int, weight: float) -> float:
    """Weighted rendezvous score ``-w / ln(u)``, ``u`` uniform in (0, 1) from (key, salt): ``(key ^ salt)``
    times the 64-bit golden ratio, mod 2^64 (a bijection: the key is well mixed already, so ``u`` is uniform,
    and for two salts the two ``u`` are independent enough that the split holds to 0.1 point over 400,000 keys,
    the same as a full splitmix64 round, at a third of its cost)."""
    if weight <= 0:
        return 0.0
    u = ((((key ^ salt) * _GOLDEN) & _MASK) + 0.5) / _TWO64
    return -weight / math.log(u)


def hrw_order(key: int, routes: Sequence[Route], weight: Callable[[Route], float]) -> list[Route]:
    """``routes`` by descending weighted rendezvous score for ``key``; weight ≤ 0 last, in their order."""
    scored = [(_score(key, r.salt, weight(r)), i, r) for i, r in enumerate(routes)]
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [r for _, _, r in scored]


class _Share:
    """One tenant's last ``size`` placements among a set of candidate routes: a ring of route indices (a byte
    each: ``size`` bytes a tenant) and each route's count among them. :meth:`Affinity.order` counts a
    placement inline (the hot path)."""

    __slots__ = ("counts", "index", "n", "pos", "ring", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.ring = bytearray(size)
        self.pos = 0
        self.n = 0
        self.index: dict[int, int] = {}
        """A route's salt → its index in ``counts`` and the ring (at most 256 routes are told apart)."""
        self.counts: list[int] = []

    def count(self, salt: int) -> int:
        i = self.index.get(salt)
        return 0 if i is None else self.counts[i]

    def evicts(self, salt: int) -> bool:
        """Would the next placement push one on ``salt``'s route out of the window?"""
        i = self.index.get(salt)
        return self.n == self.size and i is not None and self.ring[self.pos] == i

    def slot(self, salt: int) -> int:
        """``salt``'s index, given it on its first placement."""
        i = self.index[salt] = len(self.counts) & 0xFF
        if i == len(self.counts):
            self.counts.append(0)
        return i


class _Load:
    """The last ``size`` affinity assignments of a set of candidate routes (two rings: the route's salt, the
    key), each route's and each key's count among them; and each tenant's share (:class:`_Share`)."""

    __slots__ = ("counts", "keys", "n", "names", "pos", "ring_key", "ring_route", "size", "tenants")

    def __init__(self, size: int) -> None:
        self.size = size
        self.ring_route: list[int] = [0] * size
        self.ring_key: list[int] = [0] * size
        self.pos = 0
        self.n = 0
        self.counts: dict[int, int] = {}
        self.keys: dict[int, int] = {}
        self.names: dict[int, tuple[str, str]] = {}
        """A route's salt → (provider, model), for :meth:`Affinity.loads`."""
        self.tenants: dict[str, _Share] = {}

    def add(self, route: Route, key: int) -> None:
        counts, keys, pos, salt = self.counts, self.keys, self.pos, route.salt
        if self.n == self.size:
            old = self.ring_route[pos]
            counts[old] -= 1
            old = self.ring_key[pos]
            left = keys[old] - 1
            if left:
                keys[old] = left
            else:
                del keys[old]
        else:
            self.n += 1
        self.ring_route[pos] = salt
        self.ring_key[pos] = key
        got = counts.get(salt)
        if got is None:
            counts[salt] = 1
            self.names[salt] = (route.provider, route.model)
        else:
            counts[salt] = got + 1
        keys[key] = keys.get(key, 0) + 1
        self.pos = pos + 1 if pos + 1 < self.size else 0


class Affinity:
    """One alias's affinity: its settings and the bounded-load windows (per process, one per set of candidate
    routes: assignments made while a route was drained or failing do not count against the split afterwards)."""

    __slots__ = ("_loads", "moved", "moved_tenant", "settings")

    def __init__(self, settings: AffinitySettings) -> None:
        self.settings = settings
        self._loads: dict[int, _Load] = {}
        """The windows by candidate set (the XOR of its routes' salts)."""
        self.moved = 0
        """Assignments passed on from their HRW winner by the bound (a hot key), since start."""
        self.moved_tenant = 0
        """Assignments passed on because their tenant was above its share + epsilon on the route, since start."""

    def key(self, headers: Mapping[str, str], body: Mapping[str, Any], prompt_tokens: float | None) -> int | None:
        """The request's affinity key, or None: affinity off, a prompt below the cache minimum (split per
        request exactly as without affinity), or no source has a key."""
        s = self.settings
        if not s.enabled or (prompt_tokens is not None and prompt_tokens < s.min_tokens):
            return None
        if (prompt_tokens is None or prompt_tokens < s.min_tokens + BORDER_TOKENS) and (
            prompt_text_tokens(body) < s.min_tokens
        ):
            return None  # the body's estimate counts its JSON too: near the minimum, count the text itself
        if s.sources == SOURCES:  # the default order, inlined (a request's routing is on the hot path)
            value = headers.get(HEADER) or headers.get(CLAUDE_CODE_HEADER)
            if not value and (meta := headers.get(CODEX_HEADER)):
                value = _json_session(meta)
            if not (isinstance(value, str) and value):
                value = body.get("prompt_cache_key")
                if not (isinstance(value, str) and value):
                    value = _user(body)
                    if not (isinstance(value, str) and value):
                        return prefix_key(body, s.prefix_chars)
            return _digest(value)
        got = affinity_key(headers, body, s.sources, s.prefix_chars)
        return got[0] if got is not None else None

    def order(
        self, key: int, routes: Sequence[Route], weight: Callable[[Route], float], tenant: str | None = None
    ) -> list[Route]:
        """``routes`` in HRW order for ``key``, the first passed over while it is above its bound (then the
        next in HRW order), or while ``tenant`` is above its share + epsilon there (then the first route under
        its share); the route put first is counted in the window of this set of candidates."""
        if len(routes) == 2:  # the common split: two scores, one comparison, no sort
            a, b = routes
            wa, wb = weight(a), weight(b)
            if wa <= 0 or wb <= 0:
                return [b, a] if wa <= 0 < wb else [a, b]  # no choice to bound
            sa = wa / math.log(((((key ^ a.salt) * _GOLDEN) & _MASK) + 0.5) / _TWO64)  # -score (ln u < 0)
            sb = wb / math.log(((((key ^ b.salt) * _GOLDEN) & _MASK) + 0.5) / _TWO64)
            ranked = [a, b] if sa <= sb else [b, a]
            cid = a.salt ^ b.salt
            total = wa + wb
            scored = None
            w_a: float | None = wa  # the first route's weight is a's or b's: no call for the tenant bound
        else:
            scored = []
            cid = 0
            total = 0.0
            w_a = None
            for i, r in enumerate(routes):
                w = weight(r)
                cid ^= r.salt
                if w > 0:
                    total += w
                    scored.append(
                        (w / math.log(((((key ^ r.salt) * _GOLDEN) & _MASK) + 0.5) / _TWO64), i, r, w)
                    )  # -score
                else:
                    scored.append((0.0, i, r, 0.0))
            if len(scored) < 2:
                return [s[2] for s in scored]
            scored.sort()  # by -score, then the policy's order (the index is unique: routes never compared)
            ranked = [s[2] for s in scored]
            if scored[1][3] <= 0:
                return ranked  # no choice to bound
        load = self._loads.get(cid)
        if load is None:
            if len(self._loads) >= 64:
                self._loads.clear()
            load = self._loads[cid] = _Load(max(1, self.settings.window))
        n = load.n
        eps = self.settings.epsilon
        if n >= load.size // 4 and load.keys.get(key, 0) * 2 >= eps * n:  # a hot key (see the module docstring)
            ranked = self._bound(load, ranked, weight, eps)
        if tenant is not None:
            share = load.tenants.get(tenant)
            if share is None:
                if len(load.tenants) >= _TENANTS:
                    load.tenants.clear()
                share = load.tenants[tenant] = _Share(load.size)
            first = ranked[0]
            salt = first.salt
            slot = share.index.get(salt)
            counts, ring, pos, size, placed = share.counts, share.ring, share.pos, share.size, share.n
            full = placed == size
            # within the bound with this placement counted (slack first: most small tenants stop there)
            if slot is not None and (after := counts[slot] + 1 - (full and ring[pos] == slot)) > TENANT_SLACK:
                w_first = weight(first) if w_a is None else (w_a if first is routes[0] else total - w_a)
                bound = (w_first / total + eps) * (size if full else placed + 1) + TENANT_SLACK
                if after > bound:
                    ranked = self._tenant_bound(share, ranked, weight, eps)
                    salt = ranked[0].salt
                    slot = share.index.get(salt)
            if slot is None:
                slot = share.slot(salt)
            # share.add, inlined (every request of a tenant key with affinity passes here)
            if full:
                counts[ring[pos]] -= 1
            else:
                share.n = placed + 1
            ring[pos] = slot
            counts[slot] += 1
            share.pos = pos + 1 if pos + 1 < size else 0
        load.add(ranked[0], key)
        return ranked

    def _tenant_bound(
        self, share: _Share, ranked: list[Route], weight: Callable[[Route], float], eps: float
    ) -> list[Route]:
        """``ranked`` with the first route still under its share with this placement counted put first (n: the
        window's placements then); the caller found its first route over (share + epsilon) × n + slack."""
        weights = [weight(r) for r in ranked]
        total = sum(w for w in weights if w > 0)
        n = min(share.n + 1, share.size)

        def after(r: Route) -> int:  # the route's count with this placement on it
            return share.count(r.salt) + 1 - share.evicts(r.salt)

        for i in range(1, len(ranked)):
            w = weights[i]
            if w <= 0:
                break
            if after(ranked[i]) <= w / total * n:
                ranked.insert(0, ranked.pop(i))
                self.moved_tenant += 1
                break
        return ranked

    def _bound(self, load: _Load, ranked: list[Route], weight: Callable[[Route], float], eps: float) -> list[Route]:
        """``ranked`` with the first route within its bound (share + epsilon of the window) put first."""
        weights = [weight(r) for r in ranked]
        total = sum(w for w in weights if w > 0)
        counts, n = load.counts, load.n
        for i, r in enumerate(ranked):
            w = weights[i]
            if w <= 0:
                break
            if counts.get(r.salt, 0) <= (w / total + eps) * n:
                if i:
                    ranked.insert(0, ranked.pop(i))
                    self.moved += 1
                break
        return ranked

    def loads(self) -> dict[tuple[str, str], float]:
        """(provider, model) → its share of the recent affinity assignments (what the bound is measured on), in
        the busiest window (the set of candidates with the most assignments)."""
        if not self._loads:
            return {}
        load = max(self._loads.values(), key=lambda w: w.n)
        n = load.n
        return {load.names[k]: c / n for k, c in load.counts.items() if n and c}


class Sticky:
    """What a policy's ``order`` gets for a request with an affinity key: the alias's :class:`Affinity` and
    the key. The policy narrows the routes (class, SLO, breakers, exclusions) and weighs them; this orders.
    ``tenant``: the client key's id, whose share is bounded (None: an open gateway, no tenant bound).
    A plain slotted class, not a frozen dataclass: one is made per request, and a frozen one's ``__init__``
    costs a microsecond."""

    __slots__ = ("affinity", "key", "tenant")

    def __init__(self, affinity: Affinity, key: int, tenant: str | None = None) -> None:
        self.affinity = affinity
        self.key = key
        self.tenant = tenant

    def first(self, routes: Sequence[Route], weight: Callable[[Route], float]) -> list[Route]:
        """The admitted routes of the request's first choice, in HRW order with the bounds (counted)."""
        return self.affinity.order(self.key, routes, weight, self.tenant)

    def rest(self, routes: Sequence[Route], weight: Callable[[Route], float]) -> list[Route]:
        """Fallback routes in HRW order (not counted): a conversation's fallback is the same every time."""
        return hrw_order(self.key, routes, weight) if routes else []
