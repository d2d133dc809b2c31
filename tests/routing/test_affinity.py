"""Conversation affinity as pure functions: the key from each body shape, weighted rendezvous hashing's split
and its minimal moves, the hot-key bound, the policies' use of it, the upstream key by the same hash."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from tailgate.routing import AdaptivePolicy, Affinity, AffinitySettings, HealthRegistry, Sticky, WeightedPolicy
from tailgate.routing.affinity import TENANT_SLACK, affinity_key, hrw_order, prefix_key, stable_prefix
from tailgate.routing.route import Route
from tailgate.upstream import KeyPool

A = Route("m", "primary", "up-a", 80.0)
B = Route("m", "secondary", "up-b", 20.0)
DOC = "A long document the writing assistant resends every turn. " * 300  # ~17k characters


def _w(r: Route) -> float:
    return r.weight


def _chat(turns: int, system: str = "You are a careful editor.") -> dict[str, object]:
    messages: list[dict[str, object]] = [{"role": "system", "content": system}, {"role": "user", "content": DOC}]
    for i in range(turns):
        messages += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": f"turn {i}"}]
    return {"model": "m", "messages": messages}


# -- the key -----------------------------------------------------------------------------------------------


def test_key_sources_in_order() -> None:
    body = {**_chat(0), "prompt_cache_key": "pck", "user": "u1"}
    k_header = affinity_key({"x-session-id": "s1"}, body)
    k_pck = affinity_key({}, body)
    k_user = affinity_key({}, {**_chat(0), "user": "u1"})
    k_prefix = affinity_key({}, _chat(0))
    assert [k[1] for k in (k_header, k_pck, k_user, k_prefix) if k] == ["header", "prompt_cache_key", "user", "prefix"]
    assert len({k[0] for k in (k_header, k_pck, k_user, k_prefix) if k}) == 4
    # only the configured sources, in the configured order
    only_prefix = affinity_key({"x-session-id": "s1"}, body, sources=("prefix",))
    assert only_prefix == k_prefix
    assert affinity_key({}, {"model": "m"}, sources=("header", "user")) is None
    # an empty or non-string value is not a key
    assert affinity_key({"x-session-id": ""}, {"user": 7}, sources=("header", "user")) is None


def test_prefix_key_is_stable_across_turns_and_differs_between_conversations() -> None:
    keys = {affinity_key({}, _chat(t)) for t in range(6)}
    assert len(keys) == 1  # the history grows, the system prompt and first user message stay
    other = affinity_key({}, {"messages": [{"role": "user", "content": DOC + " (a different tail)"}]})
    same_system_other_doc = affinity_key({}, _chat(0, system="You are a careful editor.") | {"messages": []})
    assert other not in keys
    assert same_system_other_doc not in keys
    # a long part is hashed by head, tail and length: a change in its middle is the same key (bounded cost),
    # a change at either end or of its length is another
    mid = DOC[:8000] + "X" + DOC[8001:]
    end = DOC[:-1] + "X"
    longer = DOC + "."

    def as_key(doc: str) -> tuple[int, str] | None:
        return affinity_key({}, {"messages": [{"role": "user", "content": doc}]})

    assert as_key(mid) == as_key(DOC)
    assert as_key(end) != as_key(DOC)
    assert as_key(longer) != as_key(DOC)


def _sp(body: Mapping[str, Any], prefix_chars: int) -> tuple[str | None, int | None]:
    """The stable prefix as text and as the key the gateway uses (hashed from the same parts, no string)."""
    return stable_prefix(body, prefix_chars), prefix_key(body, prefix_chars)


def test_prefix_of_every_body_shape() -> None:
    # OpenAI content parts = the same text as a string
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": DOC}]}]}
    assert _sp(parts, 2048) == _sp({"messages": [{"role": "user", "content": DOC}]}, 2048)
    # Anthropic Messages: top-level system (string or blocks), content blocks, metadata.user_id as the user
    anth = {"system": "be brief", "messages": [{"role": "user", "content": [{"type": "text", "text": DOC}]}]}
    anth_blocks = {**anth, "system": [{"type": "text", "text": "be brief"}]}
    openai_same = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": DOC}]}
    assert _sp(anth, 2048) == _sp(anth_blocks, 2048) == _sp(openai_same, 2048)
    assert affinity_key({}, {**anth, "metadata": {"user_id": "u-9"}}) == affinity_key({}, {"user": "u-9"})
    # Responses: instructions + input (items or a string)
    resp_items = {"instructions": "be brief", "input": [{"role": "user", "content": DOC}]}
    assert _sp(resp_items, 2048) == _sp(openai_same, 2048)
    grown = {"instructions": "be brief", "input": [{"role": "user", "content": DOC}, {"role": "user", "content": "x"}]}
    assert _sp(grown, 2048) == _sp(resp_items, 2048)
    assert _sp({"input": DOC}, 64) == _sp({"input": DOC + " more turns"}, 64)
    # completions: the prompt's head
    assert _sp({"prompt": DOC}, 64) == _sp({"prompt": [DOC + " and more"]}, 64)
    assert _sp({"model": "m"}, 64) == (None, None)


# -- weighted rendezvous --------------------------------------------------------------------------------------


def test_prefix_key_of_cjk_text_and_the_text_agree() -> None:
    zh = "港口小镇在黎明前醒来，海鸥在渔网上争吵。" * 400  # 8,000 characters of CJK text (UTF-16 hashed)

    def key(system: str, doc: str, turns: int = 0) -> int | None:
        msgs: list[dict[str, object]] = [{"role": "system", "content": system}, {"role": "user", "content": doc}]
        msgs += [{"role": "user", "content": f"第{i}轮"} for i in range(turns)]
        return prefix_key({"messages": msgs}, 512)

    k = key("你是编辑。", zh)
    assert k is not None
    assert all(key("你是编辑。", zh, t) == k for t in range(1, 4))
    assert key("你是编辑。", zh[:3000] + "X" + zh[3001:]) == k  # the middle of a long part is not hashed
    assert key("你是编辑。", zh[:-1] + "X") != k  # its tail is
    assert key("你是编辑。", "X" + zh[1:]) != k  # its head is
    assert key("你是编辑。", zh + "。") != k  # its length is
    # a character moved between the parts (the same bytes hashed in turn): the parts' lengths tell them apart
    assert key("你是编辑", "。短文") != key("你是编辑。", "短文")
    # over many conversations the keys are distinct and the text form distinguishes exactly the same ones
    bodies = [{"messages": [{"role": "user", "content": f"{i}" + zh}]} for i in range(2000)]
    assert len({prefix_key(b, 512) for b in bodies}) == len({stable_prefix(b, 512) for b in bodies}) == 2000


def test_order_of_two_routes_is_the_rendezvous_order() -> None:
    """The two-route fast path of ``Affinity.order`` gives ``hrw_order``'s answer, zero weights included."""
    rng = random.Random(11)
    zero = Route("m", "zero", "up-z", 0.0)
    for pair in ([A, B], [B, A], [A, zero], [zero, B], [zero, Route("m", "z2", "up-z2", 0.0)]):
        aff = Affinity(AffinitySettings(window=100_000))  # no key is hot: the bound never applies
        for _ in range(2000):
            k = rng.getrandbits(64)
            assert aff.order(k, pair, _w) == hrw_order(k, pair, _w)
    assert aff.moved == 0


def test_hrw_splits_the_population_by_weight() -> None:
    rng = random.Random(1)
    firsts = Counter(hrw_order(rng.getrandbits(64), [A, B], _w)[0].provider for _ in range(40_000))
    assert abs(firsts["primary"] / 40_000 - 0.8) < 0.01
    three = [A, B, Route("m", "third", "up-c", 50.0)]
    firsts3 = Counter(hrw_order(rng.getrandbits(64), three, _w)[0].provider for _ in range(40_000))
    for r in three:
        assert abs(firsts3[r.provider] / 40_000 - r.weight / 150) < 0.01, firsts3


def test_hrw_moves_only_what_must_move() -> None:
    rng = random.Random(2)
    c = Route("m", "third", "up-c", 50.0)
    keys = [rng.getrandbits(64) for _ in range(5000)]
    before = {k: hrw_order(k, [A, B, c], _w)[0] for k in keys}
    # a route leaves: only its conversations move, to their second choice
    after = {k: hrw_order(k, [A, c], _w)[0] for k in keys}
    for k in keys:
        if before[k] is not B:
            assert after[k] is before[k]
        else:
            assert after[k] is hrw_order(k, [A, B, c], _w)[1]
    # a weight change (B 20 → 30): conversations move only onto B (the one whose weight grew)
    b30 = Route("m", "secondary", "up-b", 30.0)
    moved = {k for k in keys if hrw_order(k, [A, b30, c], _w)[0].provider != before[k].provider}
    assert moved
    assert all(hrw_order(k, [A, b30, c], _w)[0] is b30 for k in moved)
    assert 0.02 < len(moved) / len(keys) < 0.10  # 30/160 − 20/150 ≈ 5.4 % must move
    # weight 0 goes last
    assert hrw_order(keys[0], [Route("m", "z", "z", 0.0), A], _w)[-1].provider == "z"


def test_hot_key_is_bounded_by_share_plus_epsilon() -> None:
    aff = Affinity(AffinitySettings(epsilon=0.1, window=200))
    hot = 12345
    winner = hrw_order(hot, [A, B], _w)[0]
    share = winner.weight / 100
    firsts = [aff.order(hot, [A, B], _w)[0] for _ in range(2000)]
    late = Counter(r.provider for r in firsts[-1000:])
    assert late[winner.provider] / 1000 <= share + 0.1 + 0.01
    assert late[winner.provider] / 1000 >= share + 0.1 - 0.02  # it spills only what is over the bound
    assert aff.moved > 0
    loads = aff.loads()
    assert loads[(winner.provider, winner.model)] <= share + 0.1 + 1 / 200


def test_bound_leaves_a_spread_population_alone() -> None:
    aff = Affinity(AffinitySettings(epsilon=0.1, window=1000))
    rng = random.Random(3)
    keys = [rng.getrandbits(64) for _ in range(3000)]
    for k in keys:
        assert aff.order(k, [A, B], _w)[0] is hrw_order(k, [A, B], _w)[0]
    assert aff.moved == 0


CLAUDE_SESSION = "5f0c1d52-8a3e-4d7b-9c61-2b7f0e4a9d13"


def _claude_turn(turn: int, session: str = CLAUDE_SESSION, device: str = "d" * 64) -> dict[str, Any]:
    """A Claude Code turn: its prompt grows, its metadata.user_id is a JSON string of device and session ids."""
    user_id = f'{{"device_id":"{device}","account_uuid":"","session_id":"{session}"}}'
    messages = [{"role": "user", "content": f"turn {i}"} for i in range(turn + 1)]
    return {"model": "m", "system": "You are Claude Code.", "messages": messages, "metadata": {"user_id": user_id}}


def test_coding_agents_session_ids_are_the_key() -> None:
    """Claude Code's header and its metadata.user_id's session id give the same key on every turn (the device
    id is not the key: two sessions of one machine differ); Codex's x-codex-turn-metadata keys on its session
    id; the generic x-session-id header still comes first."""
    sid = {"x-claude-code-session-id": CLAUDE_SESSION}
    by_header = {affinity_key(sid, _claude_turn(t)) for t in range(4)}
    by_user = {affinity_key({}, _claude_turn(t)) for t in range(4)}
    assert len(by_header) == 1
    assert len(by_user) == 1
    (header_key,), (user_key,) = by_header, by_user
    assert header_key is not None
    assert user_key is not None
    assert (header_key[1], user_key[1]) == ("header", "user")
    assert header_key[0] == user_key[0]  # one session, one key, whichever source carried it
    other = affinity_key({}, _claude_turn(0, session="another-session"))
    assert other is not None
    assert other[0] != user_key[0]
    legacy = {"metadata": {"user_id": f"user_{'e' * 64}_account__session_{CLAUDE_SESSION}"}}
    assert affinity_key({}, legacy) == user_key
    codex = {"x-codex-turn-metadata": '{"turn_id":"t-7","session_id":"019a-thread","sandbox":"read-only"}'}
    got = affinity_key(codex, {"input": "hi"})
    assert got == affinity_key({"x-session-id": "019a-thread"}, {})
    assert affinity_key({**codex, "x-session-id": "mine"}, {}) == affinity_key({"x-session-id": "mine"}, {})
    # a header that is not JSON, or has no session id, is no key: the next source decides
    assert affinity_key({"x-codex-turn-metadata": "not json"}, {"prompt_cache_key": "p"}) == affinity_key(
        {}, {"prompt_cache_key": "p"}
    )
    assert affinity_key({"x-codex-turn-metadata": "{}"}, {"model": "m"}, sources=("header",)) is None
    # the inlined default order of Affinity.key agrees with affinity_key
    aff = Affinity(AffinitySettings())
    for headers, body in ((sid, _claude_turn(2)), ({}, _claude_turn(2)), (codex, {"input": "x" * 600})):
        expected = affinity_key(headers, body)
        assert expected is not None
        assert aff.key(headers, body, prompt_tokens=1000) == expected[0]


def test_key_below_the_cache_minimum_or_disabled_is_none() -> None:
    aff = Affinity(AffinitySettings(min_tokens=64))
    assert aff.key({}, _chat(0), prompt_tokens=63) is None
    assert aff.key({}, _chat(0), prompt_tokens=64) is not None
    assert Affinity(AffinitySettings(enabled=False)).key({"x-session-id": "s"}, {}, 1e6) is None


# -- the policies apply it among the routes they admit ---------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: WeightedPolicy(), lambda: AdaptivePolicy(HealthRegistry())])
def test_policies_order_by_the_conversation_and_keep_exclusions(make: object) -> None:
    policy = make()  # type: ignore[operator]
    aff = Affinity(AffinitySettings())
    rng = random.Random(4)
    routes = (A, B)
    for _ in range(200):
        key = rng.getrandbits(64)
        want = hrw_order(key, routes, _w)
        got = policy.order(routes, None, (), Sticky(aff, key))
        assert [r.provider for r in got] == [r.provider for r in want]
        assert policy.order(routes, None, (), Sticky(aff, key))[0] is got[0]  # the same each turn
        # a drained (excluded) route is never chosen, affinity or not
        assert [r.provider for r in policy.order(routes, None, {"primary"}, Sticky(aff, key))] == ["secondary"]
    # class preference still first: a batch request goes to the batch route whatever its key
    batch = (A, Route("m", "secondary", "up-b", 20.0, frozenset({"batch"})))
    for _ in range(50):
        assert policy.order(batch, "batch", (), Sticky(aff, rng.getrandbits(64)))[0].provider == "secondary"


# -- the upstream key ---------------------------------------------------------------------------------------


def test_upstream_key_by_the_same_hash() -> None:
    pool = KeyPool(["k0", "k1", "k2", "k3"])
    rng = random.Random(5)
    keys = [rng.getrandbits(64) for _ in range(4000)]
    picks = {k: pool.pick(k) for k in keys}
    assert all(pool.pick(k) == picks[k] for k in keys[:200])  # stable
    spread = Counter(p[0] for p in picks.values() if p)
    assert all(800 < n < 1200 for n in spread.values()), spread
    assert KeyPool(["k0", "k1", "k2", "k3"]).pick(keys[0]) == picks[keys[0]]  # no state: every replica agrees
    assert pool.revoke(2)
    for k in keys:
        before = picks[k]
        assert before is not None
        after = pool.pick(k)
        assert after is not None
        assert after[0] != 2
        if before[0] != 2:
            assert after == before  # only the revoked key's conversations move
    assert KeyPool([]).pick(1) is None


def test_only_hot_keys_are_passed_on() -> None:
    """Ordinary conversations keep their route even when chance puts a route over its bound; the hot key carries
    the spill. Here the bound's window is short (40) so chance alone crosses it often."""
    aff = Affinity(AffinitySettings(epsilon=0.1, window=40))
    rng = random.Random(6)
    hot = 99
    hot_winner = hrw_order(hot, [A, B], _w)[0]
    moved_ordinary = 0
    hot_firsts: list[str] = []
    for i in range(6000):
        if i % 3 == 0:
            hot_firsts.append(aff.order(hot, [A, B], _w)[0].provider)
        else:
            k = rng.getrandbits(64)
            moved_ordinary += aff.order(k, [A, B], _w)[0] is not hrw_order(k, [A, B], _w)[0]
    assert moved_ordinary == 0
    assert aff.moved > 0  # the hot key was passed on
    assert hot_firsts.count(hot_winner.provider) < len(hot_firsts)


def test_the_cache_minimum_counts_the_prompt_text_not_the_json_around_it() -> None:
    """The gateway's estimate (body bytes / 4) counts the JSON too: a 40-token prompt in a body of 90 estimated
    tokens is still split per request; a prompt of 70 tokens of text gets affinity."""
    aff = Affinity(AffinitySettings(min_tokens=64))
    short = {"model": "m", "messages": [{"role": "user", "content": "x" * 160}], "stream_options": {"a": "b" * 150}}
    assert aff.key({}, short, prompt_tokens=90) is None
    long = {"model": "m", "messages": [{"role": "system", "content": "s" * 80}, {"role": "user", "content": "x" * 200}]}
    assert aff.key({}, long, prompt_tokens=90) is not None
    anthropic = {"system": [{"type": "text", "text": "s" * 200}], "messages": [{"role": "user", "content": "hi"}]}
    assert aff.key({}, anthropic, prompt_tokens=80) is None  # 202 bytes of text: 50.5 tokens
    responses = {"instructions": "i" * 100, "input": "x" * 200}
    assert aff.key({}, responses, prompt_tokens=100) is not None  # 300 bytes: 75 tokens


# -- a tenant's share (issue 37) ---------------------------------------------------------------------------


def _mined(count: int, route: Route) -> list[int]:
    """Keys whose rendezvous winner is ``route``: what a tenant finds by probing session ids."""
    rng = random.Random(37)
    found: list[int] = []
    while len(found) < count:
        k = rng.getrandbits(64)
        if hrw_order(k, [A, B], _w)[0] is route:
            found.append(k)
    return found


def test_a_tenant_cannot_concentrate_mined_keys_on_one_route() -> None:
    """40 keys that all hash to the 20 % route, cycled by one tenant: in every stretch of its last ``window``
    placements that route has at most (0.2 + ε) × n + TENANT_SLACK; without a tenant (an open gateway) they
    all go there as before."""
    window = 200
    aff = Affinity(AffinitySettings(epsilon=0.1, window=window))
    mined = _mined(40, B)
    placed = [aff.order(mined[i % 40], [A, B], _w, "tenant-a")[0] is B for i in range(2000)]
    for t in range(1, len(placed) + 1):
        last = placed[max(0, t - window) : t]
        assert sum(last) <= (0.2 + 0.1) * len(last) + TENANT_SLACK, t
    assert sum(placed[-window:]) >= 0.2 * window  # only the excess moved
    assert aff.moved_tenant > 0
    open_gateway = Affinity(AffinitySettings(epsilon=0.1, window=window))
    assert all(open_gateway.order(mined[i % 40], [A, B], _w)[0] is B for i in range(2000))


def test_a_tenant_of_ordinary_conversations_is_never_moved() -> None:
    """A tenant with 3,000 conversations of 1–8 turns, interleaved: every turn goes to its key's rendezvous
    winner (the bound never binds by chance), and a mined tenant beside it moves nothing of this one's."""
    aff = Affinity(AffinitySettings(epsilon=0.1, window=1000))
    rng = random.Random(5)
    turns = [k for k in (rng.getrandbits(64) for _ in range(3000)) for _ in range(rng.randint(1, 8))]
    rng.shuffle(turns)
    mined = _mined(10, B)
    for i, k in enumerate(turns):
        assert aff.order(k, [A, B], _w, "tenant-b")[0] is hrw_order(k, [A, B], _w)[0]
        aff.order(mined[i % 10], [A, B], _w, "tenant-a")
    assert aff.moved_tenant > 0  # tenant-a was bounded, tenant-b never
