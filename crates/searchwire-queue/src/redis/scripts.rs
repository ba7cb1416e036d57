//! The Lua scripts: each operation is one script (a large append: plain commands plus one
//! script in a `MULTI`/`EXEC` per chunk; a small one: [`APPEND_SMALL`] alone), so it is
//! atomic in Redis and costs one round trip. `KEYS` are always `Keys::all` (keys.rs) in that
//! order; `ARGV[1]` is always the consumer group.
//!
//! What keeps them cheap: no 1 KB record crosses Lua on the hot
//! path (append writes records with a plain `HSET`, lease returns ids and the client reads
//! the records with a plain `HMGET`); the schedule member carries the message's hash and id
//! at fixed offsets, so no per-message `split` or pattern match is needed; and where a
//! command takes the script's arguments as they are, it gets `unpack(ARGV, i)` instead of a
//! table built message by message.

use super::append_scripts::{APPEND, APPEND_SMALL, RECEIPT};

/// Shared by every script: key names, and the helpers that keep the structures consistent.
///
/// A schedule member (`S:ready`, `S:delayed`) is `255 − priority` (1 byte), `retry_at` (8
/// bytes, big-endian ms), id (8 bytes, big-endian), the payload hash (32 bytes), then the
/// id in decimal: byte order is delivery order, the hash is at 18..49 and the decimal id
/// from 50 (1-based). A holder (`S:held`) is the hash (32 bytes), the lease token (8 bytes,
/// big-endian), then the stream entry of the lease call (from 41), padded with spaces to 72
/// bytes in all: a hash whose values are all ≤ 64 bytes and that has ≤ 512 fields (Redis's
/// `hash-max-listpack-*` defaults) is stored as a listpack, whose lookups are linear; a
/// lease call of 500 into an emptied `S:held` then cost ~10 % of Redis's time (measured
/// with `perf`). `S:hashes` is keyed by the 32 hash bytes.
const COMMON: &str = r#"
local S, DELAYED, READY, MSG, HASHES, HELD, CALLS, ENTRIES, DEADMSG, DEADIDS, ARRIVAL =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local LEASESEQ, LAYOUT = KEYS[12], KEYS[13]
local GROUP = ARGV[1]
local sub, byte, char = string.sub, string.byte, string.char
-- `n` leases of a stream entry (one entry per lease call) ended: once none is left, the
-- entry is acknowledged, then deleted (only acknowledged entries are ever removed from the
-- stream), and its lease end forgotten.
local function entry_done(entry, n)
  entry = string.match(entry, '^%S+')
  if redis.call('HINCRBY', ENTRIES, entry, -n) <= 0 then
    redis.call('XACK', S, GROUP, entry)
    redis.call('XDEL', S, entry)
    redis.call('HDEL', ENTRIES, entry)
    redis.call('ZREM', CALLS, entry)
  end
end
-- A holder's tail: lease token (8 bytes), stream entry, padded with spaces to 32 (the entry
-- of a holder `h` is `sub(h, 41)` without the padding).
local function holder_tail(token8, entry)
  return token8 .. entry .. string.rep(' ', 32 - #entry)
end
-- Ends the lease `h` (a holder value) of `id`.
local function end_lease(id, h)
  redis.call('HDEL', HELD, id)
  entry_done(sub(h, 41), 1)
end
local function schedule(skey, retry_at, now)
  if retry_at <= now then
    redis.call('ZADD', READY, 0, skey)
  else
    redis.call('ZADD', DELAYED, retry_at, skey)
  end
end
-- The holder value of `id` when `token` is its current lease, else nil.
local function held_by(id, token)
  local h = redis.call('HGET', HELD, id)
  if h and sub(h, 33, 40) == token then return h end
  return nil
end
-- Big-endian u32 at byte i (1-based) of s, and its encoding; a u64 as 8 bytes.
local function u32_at(s, i)
  local a, b, c, d = byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
local function u32(n)
  return char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end
local function u64(n)
  return u32(math.floor(n / 4294967296)) .. u32(n % 4294967296)
end
-- The payload hash of a record (layout: src/record.rs).
local function hash_of(rec) return sub(rec, 36, 67) end
-- The schedule member of a record whose hash and id (decimal) are given.
local function skey_of(rec, hash, id)
  return char(255 - byte(rec, 11)) .. sub(rec, 12, 19) .. sub(rec, 3, 10) .. hash .. id
end
-- A record with its attempts and last error replaced.
local function with_attempt(rec, attempts, err)
  local p = 68 -- the index's tag
  if byte(rec, p) == 1 then p = p + 5 + u32_at(rec, p + 1) else p = p + 1 end
  local q = p -- the last error's tag
  if byte(rec, q) == 1 then q = q + 5 + u32_at(rec, q + 1) else q = q + 1 end
  return sub(rec, 1, 27) .. u32(attempts) .. sub(rec, 32, p - 1) ..
    '\1' .. u32(#err) .. err .. sub(rec, q)
end
-- Removes a queued, not leased message whose record is `rec`.
local function remove_waiting(id, rec)
  local hash = hash_of(rec)
  local skey = skey_of(rec, hash, id)
  redis.call('ZREM', READY, skey)
  redis.call('ZREM', DELAYED, skey)
  redis.call('HDEL', HASHES, hash)
  redis.call('HDEL', MSG, id)
  redis.call('ZREM', ARRIVAL, id)
end
-- A dead letter: `rec` is the dead-letter record.
local function bury(id, rec)
  redis.call('HSET', DEADMSG, id, rec)
  redis.call('ZADD', DEADIDS, id, id)
end
-- Gives a leased message back to the ready set with `rec` as its record.
local function give_back(id, h, rec)
  redis.call('HSET', MSG, id, rec)
  redis.call('ZADD', READY, 0, skey_of(rec, sub(h, 1, 32), id))
end
-- The ids (decimal, space-separated) a lease call's stream entry carries, or nil.
local function entry_ids(entry)
  local r = redis.call('XRANGE', S, entry, entry)
  if #r == 0 then return nil end
  local f = r[1][2]
  for j = 1, #f, 2 do
    if f[j] == 'ids' then return f[j + 1] end
  end
  return nil
end
-- Ends a whole lease call: `each(id, h)` for every message it still holds, then the
-- entry goes (acknowledged, then deleted).
local function end_call(entry, each)
  local ids = entry_ids(entry)
  local padded = holder_tail("", entry)
  if ids then
    for id in string.gmatch(ids, '%S+') do
      local h = redis.call('HGET', HELD, id)
      if h and sub(h, 41) == padded then
        redis.call('HDEL', HELD, id)
        each(id, h)
      end
    end
  end
  redis.call('XACK', S, GROUP, entry)
  redis.call('XDEL', S, entry)
  redis.call('HDEL', ENTRIES, entry)
  redis.call('ZREM', CALLS, entry)
end
"#;

/// Replays dead letters (rare: records go through Lua). ARGV: group, now, then per message:
/// id, hash, schedule member, retry_at, record. Returns per message "n<id>" (stored),
/// "d<id>" (duplicate of queued id; the dead letter is dropped) or "g<id>" (the dead letter
/// is gone: replayed or purged meanwhile).
const REPLAY: &str = r#"
local now = tonumber(ARGV[2])
local out, stored = {}, {}
for i = 3, #ARGV, 5 do
  local id, hash, skey, retry_at, rec = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]
  local gone = redis.call('HDEL', DEADMSG, id) == 0
  redis.call('ZREM', DEADIDS, id)
  local dup = stored[hash] or redis.call('HGET', HASHES, hash)
  if gone then
    out[#out + 1] = 'g' .. id
  elseif dup then
    out[#out + 1] = 'd' .. dup
  else
    stored[hash] = id
    redis.call('HSET', HASHES, hash, id)
    redis.call('HSET', MSG, id, rec)
    redis.call('ZADD', ARRIVAL, id, id)
    schedule(skey, retry_at, now)
    out[#out + 1] = 'n' .. id
  end
end
return out
"#;

/// ARGV: group, now, max, consumer, expires_at, now as 8 big-endian bytes (a dead letter's
/// `dead_at`), the expired-lease error ([`crate::LEASE_EXPIRED`]). Moves due delayed
/// messages to the ready set; an expired lease call gives each message it still holds back
/// to the ready set with an attempt counted, or to the dead letters once its attempts are
/// exhausted (as the embedded backend does). Then leases the first `max` of the ready set:
/// XADD **one** entry for the call (fields `n`: how many leases, `ids`: which messages) and
/// XREADGROUP it into this consumer's pending list. Returns `{token, {ids}}`; the client
/// reads the records.
const LEASE: &str = r#"
local now, max, consumer, expires = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local dead_at, expired_error = ARGV[6], ARGV[7]
local function expire(id, h)
  local rec = redis.call('HGET', MSG, id)
  if not rec then return end
  local attempts = u32_at(rec, 28) + 1
  local limit = math.max(u32_at(rec, 32), 1)
  if attempts >= limit then
    local reason = expired_error .. '; max_retries (' .. limit .. ') reached'
    redis.call('HDEL', HASHES, sub(h, 1, 32))
    redis.call('HDEL', MSG, id)
    redis.call('ZREM', ARRIVAL, id)
    bury(id, dead_at .. u32(#reason) .. reason .. with_attempt(rec, attempts, reason))
  else
    give_back(id, h, with_attempt(rec, attempts, expired_error))
  end
end
while true do
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, 500)
  if #due == 0 then break end
  for _, skey in ipairs(due) do redis.call('ZADD', READY, 0, skey) end
  redis.call('ZREM', DELAYED, unpack(due))
end
while true do
  local ended = redis.call('ZRANGEBYSCORE', CALLS, '-inf', now, 'LIMIT', 0, 100)
  if #ended == 0 then break end
  for _, entry in ipairs(ended) do end_call(entry, expire) end
end
if max <= 0 then return {} end
-- All scores are 0, so ZPOPMIN takes the first members in delivery order.
local popped = redis.call('ZPOPMIN', READY, max)
if #popped == 0 then return {} end
local ids, hashes_ = {}, {}
for i = 1, #popped, 2 do
  local m = popped[i]
  ids[#ids + 1] = sub(m, 50)
  hashes_[#hashes_ + 1] = sub(m, 18, 49)
end
local entry = redis.call('XADD', S, '*', 'n', #ids, 'ids', table.concat(ids, ' '))
redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', 1, 'STREAMS', S, '>')
redis.call('HSET', ENTRIES, entry, #ids)
redis.call('ZADD', CALLS, expires, entry)
local token = redis.call('INCR', LEASESEQ)
local tail = holder_tail(u64(token), entry)
local held = {}
for i, id in ipairs(ids) do
  held[#held + 1] = id
  held[#held + 1] = hashes_[i] .. tail
end
redis.call('HSET', HELD, unpack(held))
return {token, ids}
"#;

/// ARGV: group, ids... (distinct). Returns how many were queued. One command per structure
/// for all of them, taking the ids as they are, and one count-down per lease call.
const ACK: &str = r#"
local held = redis.call('HMGET', HELD, unpack(ARGV, 2))
local hashes, counts, any_held = {}, {}, false
for i = 1, #held do
  local h = held[i]
  if h then
    any_held = true
    hashes[#hashes + 1] = sub(h, 1, 32)
    local e = sub(h, 41)
    counts[e] = (counts[e] or 0) + 1
  else
    -- Not leased: waiting in the ready or delayed set (or gone already).
    local id = ARGV[i + 1]
    local rec = redis.call('HGET', MSG, id)
    if rec then
      local hash = hash_of(rec)
      local skey = skey_of(rec, hash, id)
      redis.call('ZREM', READY, skey)
      redis.call('ZREM', DELAYED, skey)
      hashes[#hashes + 1] = hash
    end
  end
end
local gone = redis.call('HDEL', MSG, unpack(ARGV, 2))
if gone == 0 then return 0 end
if any_held then redis.call('HDEL', HELD, unpack(ARGV, 2)) end
redis.call('HDEL', HASHES, unpack(hashes))
redis.call('ZREM', ARRIVAL, unpack(ARGV, 2))
for e, n in pairs(counts) do entry_done(e, n) end
return gone
"#;

/// ARGV: group, now, id, lease token (8 bytes), record, schedule member, retry_at. Returns
/// 1, or 0 when the lease is not current.
const RESCHEDULE: &str = r#"
local now, id = tonumber(ARGV[2]), ARGV[3]
local h = held_by(id, ARGV[4])
if not h then return 0 end
end_lease(id, h)
redis.call('HSET', MSG, id, ARGV[5])
schedule(ARGV[6], tonumber(ARGV[7]), now)
return 1
"#;

/// ARGV: group, id, lease token (8 bytes), dead-letter record. Returns 1, or 0 when the
/// lease is not current.
const KILL: &str = r#"
local id = ARGV[2]
local h = held_by(id, ARGV[3])
if not h then return 0 end
end_lease(id, h)
redis.call('HDEL', HASHES, sub(h, 1, 32))
redis.call('HDEL', MSG, id)
redis.call('ZREM', ARRIVAL, id)
bury(id, ARGV[4])
return 1
"#;

/// ARGV: group, consumer. Gives back every lease of `consumer` (its lease calls are its
/// pending entries in the consumer group), setting the record's pending_shutdown flag (bit
/// 0 of byte 2). Returns how many.
const RELEASE: &str = r#"
local consumer, n = ARGV[2], 0
local function release(id, h)
  local rec = redis.call('HGET', MSG, id)
  if rec then
    give_back(id, h, sub(rec, 1, 1) .. char(bit.bor(byte(rec, 2), 1)) .. sub(rec, 3))
    n = n + 1
  end
end
while true do
  local page = redis.call('XPENDING', S, GROUP, '-', '+', 1000, consumer)
  if #page == 0 then break end
  for _, p in ipairs(page) do end_call(p[1], release) end
end
return n
"#;

/// ARGV: group, "*" or ids... Returns how many dead letters were deleted.
const PURGE: &str = r#"
if ARGV[2] == '*' then
  local n = redis.call('ZCARD', DEADIDS)
  redis.call('DEL', DEADMSG, DEADIDS)
  return n
end
local n = 0
for i = 2, #ARGV do
  if redis.call('HDEL', DEADMSG, ARGV[i]) == 1 then n = n + 1 end
  redis.call('ZREM', DEADIDS, ARGV[i])
end
return n
"#;

/// ARGV: group, now. Returns backlog, due, leased, oldest record (or false), dead letters.
const STATS: &str = r#"
local now = tonumber(ARGV[2])
local due = redis.call('ZCARD', READY) + redis.call('ZCOUNT', DELAYED, '-inf', now)
local first = redis.call('ZRANGE', ARRIVAL, 0, 0)
local oldest = false
if #first > 0 then oldest = redis.call('HGET', MSG, first[1]) end
return {redis.call('HLEN', MSG), due, redis.call('HLEN', HELD), oldest, redis.call('ZCARD', DEADIDS)}
"#;

/// ARGV: group, which ("queued" or "dead"), after id, limit. Returns records by id.
const LIST: &str = r#"
local ids, hash
if ARGV[2] == 'dead' then ids, hash = DEADIDS, DEADMSG else ids, hash = ARRIVAL, MSG end
local found = redis.call('ZRANGEBYSCORE', ids, '(' .. ARGV[3], '+inf', 'LIMIT', 0, tonumber(ARGV[4]))
if #found == 0 then return {} end
return redis.call('HMGET', hash, unpack(found))
"#;

/// The layout version this code reads and writes (`S:layout`).
pub(super) const LAYOUT_VERSION: &str = "2";

/// Brings a queue to layout 2 once (`S:layout`), atomically: several processes connecting
/// at once run it one after the other and all but the first find nothing to do. ARGV:
/// group, now, version. KEYS 14–16 are layout 1's `S:meta`, `S:inflight`, `S:leases`.
///
/// Layout 1 (before 2026-12-01) kept, per message, `S:meta` (hash and schedule member),
/// `S:inflight` (holder) and `S:leases` (lease end), and schedule members
/// `PPPRRRRRRRRRRRRRRRRIIIIIIIIIIIIIIIIIIII`, and keyed `S:hashes` by the hash in hex.
/// Records, arrival, dead letters and counters are the same in both. Every queued message is scheduled again from its record:
/// due ones to the ready set, the others to the delayed set; a message that was leased is
/// given back due at its `retry_at` and marked `pending_shutdown` (its holder may have
/// delivered it: at-least-once), without an attempt counted. Layout 1's stream entries are
/// acknowledged and deleted. Returns how many messages were rescheduled (0: nothing to do).
const MIGRATE: &str = r#"
local now, version = tonumber(ARGV[2]), ARGV[3]
local META, INFLIGHT, OLDLEASES = KEYS[14], KEYS[15], KEYS[16]
if redis.call('GET', LAYOUT) == version then return 0 end
local n = 0
if redis.call('HLEN', MSG) > 0 then
  local leased = {}
  for _, id in ipairs(redis.call('HKEYS', INFLIGHT)) do leased[id] = true end
  redis.call('DEL', READY, DELAYED, HELD, CALLS)
  for _, id in ipairs(redis.call('HKEYS', MSG)) do
    local rec = redis.call('HGET', MSG, id)
    if leased[id] then
      rec = sub(rec, 1, 1) .. char(bit.bor(byte(rec, 2), 1)) .. sub(rec, 3)
      redis.call('HSET', MSG, id, rec)
    end
    local retry_at = 0
    for j = 12, 19 do retry_at = retry_at * 256 + byte(rec, j) end
    schedule(skey_of(rec, hash_of(rec), id), retry_at, now)
    n = n + 1
  end
end
while true do
  local page = redis.call('XRANGE', S, '-', '+', 'COUNT', 1000)
  if #page == 0 then break end
  for _, e in ipairs(page) do
    redis.call('XACK', S, GROUP, e[1])
    redis.call('XDEL', S, e[1])
  end
end
-- Layout 1 keyed S:hashes by the hash in hex.
local hashes = redis.call('HGETALL', HASHES)
for j = 1, #hashes, 2 do
  if #hashes[j] == 64 then
    redis.call('HDEL', HASHES, hashes[j])
    redis.call('HSET', HASHES, (string.gsub(hashes[j], '..', function(x) return char(tonumber(x, 16)) end)), hashes[j + 1])
  end
end
redis.call('DEL', META, INFLIGHT, OLDLEASES, ENTRIES)
redis.call('SET', LAYOUT, version)
return n
"#;

/// One script per operation.
pub(super) struct Scripts {
    /// Run with EVAL inside the append's `MULTI` (an EVALSHA there that met an emptied
    /// script cache would fail after the records were written); this is its source.
    pub append_source: String,
    /// A whole small append in one call (`EVALSHA`, outside any transaction).
    pub append_small: redis::Script,
    pub replay: redis::Script,
    pub lease: redis::Script,
    pub ack: redis::Script,
    pub reschedule: redis::Script,
    pub kill: redis::Script,
    pub release: redis::Script,
    pub purge: redis::Script,
    pub stats: redis::Script,
    pub list: redis::Script,
    pub migrate: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let s = |body: &str| redis::Script::new(&format!("{COMMON}{body}"));
        let receipt = RECEIPT.replace(
            "RECEIPT_TTL_MS",
            &super::RECEIPT_TTL.as_millis().to_string(),
        );
        Scripts {
            append_source: APPEND.replace("RECEIPT_PRELUDE", &receipt),
            append_small: s(&format!("{receipt}{APPEND_SMALL}")),
            replay: s(REPLAY),
            lease: s(LEASE),
            ack: s(ACK),
            reschedule: s(RESCHEDULE),
            kill: s(KILL),
            release: s(RELEASE),
            purge: s(PURGE),
            stats: s(STATS),
            list: s(LIST),
            migrate: s(MIGRATE),
        }
    }

    pub(super) fn all(&self) -> [&redis::Script; 11] {
        [
            &self.append_small,
            &self.replay,
            &self.lease,
            &self.ack,
            &self.reschedule,
            &self.kill,
            &self.release,
            &self.purge,
            &self.stats,
            &self.list,
            &self.migrate,
        ]
    }
}
