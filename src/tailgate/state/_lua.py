"""The Lua scripts of the Redis backend; each runs atomically inside Redis (or Valkey) on Redis's clock.

Times come from ``TIME`` inside the script, so replicas on hosts with different clocks agree. Numbers that
may be fractional are returned as strings: Redis turns a Lua number reply into an integer by truncation.
The counter is the same sliding window of 60 sub-buckets as ``window.py`` (see its docstring for why).
"""

from __future__ import annotations

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# take(key, amount, limit, window <= 0: none) -> {ok, retry_after, remaining, reset, bucket counted in or '-'}
_TAKE_FN = """
local function take(key, amount, limit, window)
  if window <= 0 then
    local used = tonumber(redis.call('HGET', key, 't') or '0')
    if used < 0 then used = 0 end
    if amount > limit or used + amount > limit then
      return {0, 'inf', tostring(math.max(0, limit - used)), '0', '-'}
    end
    if amount > 0 then redis.call('HINCRBYFLOAT', key, 't', amount) end
    return {1, '0', tostring(math.max(0, limit - used - amount)), '0', '-'}
  end
  local b = window / 60
  local epoch = math.floor(now / b)
  local lo = epoch - 59
  local flat = redis.call('HGETALL', key)
  local used, live, newest = 0, {}, nil
  for i = 1, #flat, 2 do
    local k, v = tonumber(flat[i]), tonumber(flat[i + 1])
    if k < lo then
      redis.call('HDEL', key, flat[i])
    else
      used = used + v
      table.insert(live, {k, v})
      if v > 0 and (newest == nil or k > newest) then newest = k end
    end
  end
  if used < 0 then used = 0 end
  local function reset(n)
    if n == nil then return '0' end
    return tostring(math.max(0, (n + 60) * b - now))
  end
  if amount > limit then
    return {0, 'inf', tostring(math.max(0, limit - used)), reset(newest), '-'}
  end
  if used + amount <= limit then
    if amount > 0 then
      redis.call('HINCRBYFLOAT', key, tostring(epoch), amount)
      redis.call('PEXPIRE', key, math.ceil(window * 1000) + 1000)
      if newest == nil or epoch > newest then newest = epoch end
      return {1, '0', tostring(math.max(0, limit - used - amount)), reset(newest), tostring(epoch)}
    end
    return {1, '0', tostring(math.max(0, limit - used - amount)), reset(newest), '-'}
  end
  table.sort(live, function(a, c) return a[1] < c[1] end)
  local need, freed, wait = used + amount - limit, 0, window
  for _, kv in ipairs(live) do
    freed = freed + kv[2]
    if freed >= need then
      wait = (kv[1] + 60) * b - now
      break
    end
  end
  return {0, tostring(math.max(0, wait)), tostring(math.max(0, limit - used)), reset(newest), '-'}
end
"""

# KEYS[1] counter hash; ARGV amount, limit, window (<= 0: none). -> take()'s reply
TAKE = (
    _NOW
    + _TAKE_FN
    + """
return take(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
"""
)

# adjust(key, delta, window <= 0: none, bucket of the take refunded or nil) -> usage after (string)
_ADJUST_FN = """
local function adjust(key, delta, window, at)
  if window <= 0 then
    local v = tonumber(redis.call('HINCRBYFLOAT', key, 't', delta))
    if v < 0 then redis.call('HSET', key, 't', '0'); v = 0 end
    return tostring(v)
  end
  local b = window / 60
  local epoch = math.floor(now / b)
  local lo = epoch - 59
  if delta < 0 and at ~= nil then
    if at >= lo then
      local cur = tonumber(redis.call('HGET', key, tostring(at)) or 'nil')
      if cur ~= nil then
        redis.call('HSET', key, tostring(at), tostring(math.max(0, cur + delta)))
      end
    end
  else
    redis.call('HINCRBYFLOAT', key, tostring(epoch), delta)
    redis.call('PEXPIRE', key, math.ceil(window * 1000) + 1000)
  end
  local flat = redis.call('HGETALL', key)
  local used = 0
  for i = 1, #flat, 2 do
    if tonumber(flat[i]) < lo then redis.call('HDEL', key, flat[i]) else used = used + tonumber(flat[i + 1]) end
  end
  return tostring(math.max(0, used))
end
"""

# KEYS[1] counter hash; ARGV delta, window (<= 0: none), bucket of the take refunded or '-'. -> usage after
ADJUST = (
    _NOW
    + _ADJUST_FN
    + """
return adjust(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
"""
)

# Requests' ends in one call: every correction (as ADJUST), then the slots given back.
# KEYS: one counter hash per correction, then one gauge zset per slot released.
# ARGV: n corrections, then delta, window, bucket or '-' per correction, then one token per slot. -> n
SETTLE = (
    _NOW
    + _ADJUST_FN
    + """
local n = tonumber(ARGV[1])
for i = 1, n do
  local a = 2 + (i - 1) * 3
  adjust(KEYS[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
end
for j = n + 1, #KEYS do redis.call('ZREM', KEYS[j], ARGV[1 + n * 2 + j]) end
return n
"""
)

# KEYS[1] counter hash; ARGV window. -> usage (string)
USAGE = (
    _NOW
    + """
local window = tonumber(ARGV[1])
if window <= 0 then return tostring(math.max(0, tonumber(redis.call('HGET', KEYS[1], 't') or '0'))) end
local lo = math.floor(now / (window / 60)) - 59
local flat = redis.call('HGETALL', KEYS[1])
local used = 0
for i = 1, #flat, 2 do
  if tonumber(flat[i]) >= lo then used = used + tonumber(flat[i + 1]) end
end
return tostring(math.max(0, used))
"""
)

# acquire(key, token, limit, ttl, count) -> {ok, in_use}: ``count`` slots at once, all or nothing (a replica's
# leased slots, state/allowance.py): one member ``token`` when count is 1, else ``token:1`` .. ``token:count``.
_ACQUIRE_FN = """
local function acquire(key, token, limit, ttl, count)
  count = count or 1
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local n = redis.call('ZCARD', key)
  if n + count > limit then return {0, n} end
  if count == 1 then
    redis.call('ZADD', key, now + ttl, token)
  else
    for i = 1, count do redis.call('ZADD', key, now + ttl, token .. ':' .. i) end
  end
  local keep = math.ceil(ttl * 1000) + 1000
  if redis.call('PTTL', key) < keep then redis.call('PEXPIRE', key, keep) end  -- a short TTL never cuts a long one
  return {1, n + count}
end
"""

# KEYS[1] gauge zset; ARGV ttl, then members. Members still in the set expire ``ttl`` from now (a replica's
# spare slots, renewed while it lives, state/allowance.py); one gone (expired, released) stays gone. -> renewed
RENEW = (
    _NOW
    + """
local ttl = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ttl, ARGV[i]) end
local keep = math.ceil(ttl * 1000) + 1000
if n > 0 and redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
return n
"""
)

# KEYS[1] gauge zset; ARGV token, limit, ttl. -> {ok, in_use}
ACQUIRE = (
    _NOW
    + _ACQUIRE_FN
    + """
return acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
"""
)

# Requests' admissions in one call, each atomic and all or nothing: take every claim, then the slot.
# ARGV: m reservations, then for each: n claims, 1 when it asks a slot (else 0), amount, limit, window per
# claim, then the slot's token, limit, ttl, count. KEYS, in the same order: each reservation's counter hashes, then
# its gauge zset when it asks a slot.
# -> one reply per reservation: {ok, refused part (1-based; n + 1 is the slot; 0 when ok), slots in use, then
#    take()'s five fields for each claim decided}. A refusal gives back, in the same call, what the claims
#    before it took.
RESERVE = (
    _NOW
    + _TAKE_FN
    + _ACQUIRE_FN
    + """
local function reserve(k, a)
  local n, slot = tonumber(ARGV[a]), ARGV[a + 1] == '1'
  a = a + 2
  local out = {1, 0, 0}
  local taken = {}
  local function undo(part)
    for _, t in ipairs(taken) do
      redis.call('HINCRBYFLOAT', t[1], t[2] == '-' and 't' or t[2], -t[3])
    end
    out[1], out[2] = 0, part
  end
  for i = 1, n do
    local amount = tonumber(ARGV[a])
    local r = take(KEYS[k], amount, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
    for _, v in ipairs(r) do table.insert(out, v) end
    if r[1] == 0 then
      undo(i)
      return out
    end
    if amount > 0 then table.insert(taken, {KEYS[k], r[5], amount}) end
    k, a = k + 1, a + 3
  end
  if slot then
    local r = acquire(KEYS[k], ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]))
    out[3] = r[2]
    if r[1] == 0 then undo(n + 1) end
  end
  return out
end
local replies, k, a = {}, 1, 2
for j = 1, tonumber(ARGV[1]) do
  local n, slot = tonumber(ARGV[a]), ARGV[a + 1] == '1'
  local next_k = k + n + (slot and 1 or 0)
  local next_a = a + 2 + 3 * n + (slot and 4 or 0)
  replies[j] = reserve(k, a)
  k, a = next_k, next_a
end
return replies
"""
)

# KEYS[1] pause hash; ARGV name, seconds, reason. A longer pause in force stays; seconds <= 0 clears.
PAUSE = (
    _NOW
    + """
local seconds = tonumber(ARGV[2])
if seconds <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]); return 0 end
local until_ = now + seconds
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local bar = string.find(cur, '|', 1, true)
  if tonumber(string.sub(cur, 1, bar - 1)) >= until_ then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.6f', until_) .. '|' .. ARGV[3])
return 1
"""
)

# KEYS[1] channel hash; ARGV replica, ttl, blob.
PUBLISH = (
    _NOW
    + """
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.6f', now + tonumber(ARGV[2])) .. '|' .. ARGV[3])
return 1
"""
)

# One round trip per sync tick. KEYS: generations, pauses, flags, replicas, then one hash per channel.
# ARGV: replica, heartbeat ttl. Heartbeats this replica, drops expired pauses, replicas and blobs, and
# returns {now, generations, pauses, flags, replicas, channel 1, channel 2, ...} as flat lists.
SYNC = (
    _NOW
    + """
redis.call('HSET', KEYS[4], ARGV[1], string.format('%.6f', now + tonumber(ARGV[2])))
local out = {string.format('%.6f', now), redis.call('HGETALL', KEYS[1])}
for i = 2, #KEYS do
  if i ~= 3 then
    local flat = redis.call('HGETALL', KEYS[i])
    local keep = {}
    for j = 1, #flat, 2 do
      local v = flat[j + 1]
      local bar = string.find(v, '|', 1, true)
      local until_ = tonumber(bar and string.sub(v, 1, bar - 1) or v)
      if until_ < now then
        redis.call('HDEL', KEYS[i], flat[j])
      else
        table.insert(keep, flat[j]); table.insert(keep, v)
      end
    end
    table.insert(out, keep)
  else
    table.insert(out, redis.call('HGETALL', KEYS[i]))
  end
end
return out
"""
)


def slot_members(token: str, count: int) -> list[str]:
    """The members a grant of ``count`` slots under ``token`` holds in the cap's set (``ACQUIRE`` names them so)."""
    return [token] if count == 1 else [f"{token}:{i}" for i in range(1, count + 1)]


# KEYS[1] bucket hash {v: level, u: updated}; ARGV amount, rate (/s), burst, keep (the level the take must leave:
# state/priority.py keep_level). The steps of priority.PaceBucket.take. -> {ok, retry_after, level after}
PACE = (
    _NOW
    + """
local amount, rate, burst, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local h = redis.call('HMGET', KEYS[1], 'v', 'u')
local v, u = tonumber(h[1]), tonumber(h[2])
if v == nil or u == nil then v, u = burst, now end
if now > u then
  v = math.min(burst, v + (now - u) * rate)
  u = now
end
local ok, retry = 0, '0'
if v - amount >= keep then
  v = v - amount
  ok = 1
elseif amount + keep > burst then
  retry = 'inf'
else
  retry = tostring((amount + keep - v) / rate)
end
redis.call('HSET', KEYS[1], 'v', tostring(v), 'u', tostring(u))
redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(0, burst - v) / rate * 1000) + 60000)
return {ok, retry, tostring(v)}
"""
)
