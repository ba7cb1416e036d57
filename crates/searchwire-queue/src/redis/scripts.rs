//! The Lua scripts: each operation is one script, so it is atomic in Redis and costs one
//! round trip. `KEYS` are always [`super::Keys::all`] in that order; `ARGV[1]` is always the
//! consumer group.

/// Shared by every script: key names, and the helpers that keep the structures consistent.
const COMMON: &str = r#"
local S, DELAYED, READY, MSG, META, HASHES, LEASES, INFLIGHT, DEADMSG, DEADIDS, ARRIVAL, LEASESEQ =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local ENTRIES = KEYS[13]
local GROUP = ARGV[1]
local function split(s)
  local t = {}
  for w in string.gmatch(s, '%S+') do t[#t + 1] = w end
  return t
end
local function id_of(skey) return string.match(string.sub(skey, 20), '^0*(%d+)$') end
-- `n` leases of a stream entry (one entry per lease call) ended: once none is left, the
-- entry is acknowledged, then deleted (only acknowledged entries are ever removed from the
-- stream). An entry without a count (written before entries were per call: one per
-- message) goes at its first end.
local function entry_done(entry, n)
  if redis.call('HINCRBY', ENTRIES, entry, -n) <= 0 then
    redis.call('XACK', S, GROUP, entry)
    redis.call('XDEL', S, entry)
    redis.call('HDEL', ENTRIES, entry)
  end
end
-- Ends a lease.
local function end_lease(id)
  local inf = redis.call('HGET', INFLIGHT, id)
  if not inf then return nil end
  local f = split(inf)
  entry_done(f[1], 1)
  redis.call('HDEL', INFLIGHT, id)
  redis.call('ZREM', LEASES, id)
  return f
end
local function schedule(skey, retry_at, now)
  if retry_at <= now then
    redis.call('ZADD', READY, 0, skey)
  else
    redis.call('ZADD', DELAYED, retry_at, skey)
  end
end
local function lease_is(id, token)
  local inf = redis.call('HGET', INFLIGHT, id)
  return inf and split(inf)[2] == token
end
-- Big-endian u32 at byte i (1-based) of s, and its encoding.
local function u32_at(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
local function u32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end
-- A record (layout: src/record.rs) with its attempts and last error replaced.
local function with_attempt(rec, attempts, err)
  local p = 68 -- the index's tag
  if string.byte(rec, p) == 1 then p = p + 5 + u32_at(rec, p + 1) else p = p + 1 end
  local q = p -- the last error's tag
  if string.byte(rec, q) == 1 then q = q + 5 + u32_at(rec, q + 1) else q = q + 1 end
  return string.sub(rec, 1, 27) .. u32(attempts) .. string.sub(rec, 32, p - 1) ..
    '\1' .. u32(#err) .. err .. string.sub(rec, q)
end
-- Removes every trace of a queued message; returns whether it was queued.
local function remove(id)
  local m = redis.call('HGET', META, id)
  if not m then return false end
  local f = split(m)
  if redis.call('HGET', HASHES, f[1]) == id then redis.call('HDEL', HASHES, f[1]) end
  if not end_lease(id) then
    redis.call('ZREM', READY, f[2])
    redis.call('ZREM', DELAYED, f[2])
  end
  redis.call('HDEL', MSG, id)
  redis.call('HDEL', META, id)
  redis.call('ZREM', ARRIVAL, id)
  return true
end
"#;

/// ARGV: group, now, then per message: id, hash, skey, retry_at, record, dead ("1" when the
/// message is a replayed dead letter, else ""). Returns per message "n<id>" (stored),
/// "d<id>" (duplicate of queued id) or "g<id>" (a replayed dead letter that is gone).
/// The de-duplication reads are one HMGET and the writes one command per structure for the
/// whole chunk, not one per message (each `redis.call` costs Redis time and an AOF entry).
const APPEND: &str = r#"
local now = tonumber(ARGV[2])
local hashes = {}
for i = 3, #ARGV, 6 do hashes[#hashes + 1] = ARGV[i + 1] end
if #hashes == 0 then return {} end
local existing = redis.call('HMGET', HASHES, unpack(hashes))
local stored = {} -- hash -> id stored by this call (duplicates within the chunk)
local h, msg, meta, arrival, ready, delayed, out = {}, {}, {}, {}, {}, {}, {}
for k = 1, #hashes do
  local i = 3 + (k - 1) * 6
  local id, hash, skey, retry_at, rec, dead =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5]
  local gone = false
  if dead ~= '' then
    gone = redis.call('HDEL', DEADMSG, id) == 0
    redis.call('ZREM', DEADIDS, id)
  end
  local dup = existing[k] or stored[hash]
  if gone then
    out[#out + 1] = 'g' .. id
  elseif dup then
    out[#out + 1] = 'd' .. dup
  else
    stored[hash] = id
    h[#h + 1] = hash; h[#h + 1] = id
    msg[#msg + 1] = id; msg[#msg + 1] = rec
    meta[#meta + 1] = id; meta[#meta + 1] = hash .. ' ' .. skey
    arrival[#arrival + 1] = id; arrival[#arrival + 1] = id
    if retry_at <= now then
      ready[#ready + 1] = 0; ready[#ready + 1] = skey
    else
      delayed[#delayed + 1] = retry_at; delayed[#delayed + 1] = skey
    end
    out[#out + 1] = 'n' .. id
  end
end
if #h > 0 then
  redis.call('HSET', HASHES, unpack(h))
  redis.call('HSET', MSG, unpack(msg))
  redis.call('HSET', META, unpack(meta))
  redis.call('ZADD', ARRIVAL, unpack(arrival))
end
if #ready > 0 then redis.call('ZADD', READY, unpack(ready)) end
if #delayed > 0 then redis.call('ZADD', DELAYED, unpack(delayed)) end
return out
"#;

/// ARGV: group, now, max, consumer, expires_at, now as 8 big-endian bytes (a dead letter's
/// `dead_at`), the expired-lease error ([`crate::LEASE_EXPIRED`]). Moves due delayed
/// messages to the ready set; an expired lease counts an attempt and goes back to the ready
/// set, or to the dead letters once its attempts are exhausted (as the embedded backend
/// does). Then leases the first `max` of the ready set: XADD **one** entry for the call
/// (field `n`: how many leases it carries, counted down in `S:entries` as they end) and
/// XREADGROUP it into this consumer's pending list. Returns lease number, record pairs.
const LEASE: &str = r#"
local now, max, consumer, expires = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local dead_at, expired_error = ARGV[6], ARGV[7]
local function expire(id)
  end_lease(id)
  redis.call('ZREM', LEASES, id)
  local rec, m = redis.call('HGET', MSG, id), redis.call('HGET', META, id)
  if not (rec and m) then return end
  local attempts = u32_at(rec, 28) + 1
  local limit = math.max(u32_at(rec, 32), 1)
  if attempts >= limit then
    local reason = expired_error .. '; max_retries (' .. limit .. ') reached'
    remove(id)
    redis.call('HSET', DEADMSG, id, dead_at .. u32(#reason) .. reason .. with_attempt(rec, attempts, reason))
    redis.call('ZADD', DEADIDS, id, id)
  else
    redis.call('HSET', MSG, id, with_attempt(rec, attempts, expired_error))
    redis.call('ZADD', READY, 0, split(m)[2])
  end
end
while true do
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, 500)
  if #due == 0 then break end
  for _, skey in ipairs(due) do redis.call('ZADD', READY, 0, skey) end
  redis.call('ZREM', DELAYED, unpack(due))
end
while true do
  local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, 500)
  if #expired == 0 then break end
  for _, id in ipairs(expired) do expire(id) end
end
if max <= 0 then return {} end
-- All scores are 0, so ZPOPMIN takes the first members in delivery order (one command
-- where ZRANGE + ZREM were two); it answers member, score pairs.
local popped = redis.call('ZPOPMIN', READY, max)
if #popped == 0 then return {} end
local ids = {}
for i = 1, #popped, 2 do ids[#ids + 1] = id_of(popped[i]) end
local entry = redis.call('XADD', S, '*', 'n', #ids)
redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', 1, 'STREAMS', S, '>')
redis.call('HSET', ENTRIES, entry, #ids)
local first = redis.call('INCRBY', LEASESEQ, #ids) - #ids
local recs = redis.call('HMGET', MSG, unpack(ids))
local inflight, leases, out = {}, {}, {}
local tail = ' ' .. consumer
for i, id in ipairs(ids) do
  local n = first + i
  inflight[#inflight + 1] = id
  inflight[#inflight + 1] = entry .. ' ' .. n .. tail
  leases[#leases + 1] = expires
  leases[#leases + 1] = id
  out[#out + 1] = n
  out[#out + 1] = recs[i]
end
redis.call('HSET', INFLIGHT, unpack(inflight))
redis.call('ZADD', LEASES, unpack(leases))
return out
"#;

/// ARGV: group, ids... Returns how many were queued. What `remove` does per message, done
/// with one command per structure for all of them (and one count-down per stream entry,
/// usually one: the lease call's), which is what makes acks cheap in Redis.
const ACK: &str = r#"
local ids, seen = {}, {}
for i = 2, #ARGV do
  if not seen[ARGV[i]] then seen[ARGV[i]] = true; ids[#ids + 1] = ARGV[i] end
end
if #ids == 0 then return 0 end
local metas = redis.call('HMGET', META, unpack(ids))
local infs = redis.call('HMGET', INFLIGHT, unpack(ids))
local present, hashes, entries, leased, waiting = {}, {}, {}, {}, {}
for i, id in ipairs(ids) do
  if metas[i] then
    local f = split(metas[i])
    present[#present + 1] = id
    hashes[#hashes + 1] = f[1]
    if infs[i] then
      local e = string.match(infs[i], '^%S+')
      entries[e] = (entries[e] or 0) + 1
      leased[#leased + 1] = id
    else
      waiting[#waiting + 1] = f[2]
    end
  end
end
if #present == 0 then return 0 end
local owners = redis.call('HMGET', HASHES, unpack(hashes))
local owned = {}
for i, id in ipairs(present) do
  if owners[i] == id then owned[#owned + 1] = hashes[i] end
end
if #owned > 0 then redis.call('HDEL', HASHES, unpack(owned)) end
if #leased > 0 then
  for e, n in pairs(entries) do entry_done(e, n) end
  redis.call('HDEL', INFLIGHT, unpack(leased))
  redis.call('ZREM', LEASES, unpack(leased))
end
if #waiting > 0 then
  redis.call('ZREM', READY, unpack(waiting))
  redis.call('ZREM', DELAYED, unpack(waiting))
end
redis.call('HDEL', MSG, unpack(present))
redis.call('HDEL', META, unpack(present))
redis.call('ZREM', ARRIVAL, unpack(present))
return #present
"#;

/// ARGV: group, now, id, lease number, record, skey, retry_at. Returns 1, or 0 when the
/// lease is not current.
const RESCHEDULE: &str = r#"
local now, id, token = tonumber(ARGV[2]), ARGV[3], ARGV[4]
if not lease_is(id, token) then return 0 end
end_lease(id)
local m = split(redis.call('HGET', META, id))
redis.call('HSET', MSG, id, ARGV[5])
redis.call('HSET', META, id, m[1] .. ' ' .. ARGV[6])
schedule(ARGV[6], tonumber(ARGV[7]), now)
return 1
"#;

/// ARGV: group, id, lease number, dead-letter record. Returns 1, or 0 when the lease is
/// not current.
const KILL: &str = r#"
local id, token = ARGV[2], ARGV[3]
if not lease_is(id, token) then return 0 end
remove(id)
redis.call('HSET', DEADMSG, id, ARGV[4])
redis.call('ZADD', DEADIDS, id, id)
return 1
"#;

/// ARGV: group, consumer. Gives back every lease of `consumer`, setting the record's
/// pending_shutdown flag (bit 0 of byte 2). Returns how many.
const RELEASE: &str = r#"
local consumer = ARGV[2]
local all = redis.call('HGETALL', INFLIGHT)
local n = 0
for i = 1, #all, 2 do
  local id = all[i]
  if split(all[i + 1])[3] == consumer then
    end_lease(id)
    local rec = redis.call('HGET', MSG, id)
    local m = redis.call('HGET', META, id)
    if rec and m then
      rec = string.sub(rec, 1, 1) .. string.char(bit.bor(string.byte(rec, 2), 1)) .. string.sub(rec, 3)
      redis.call('HSET', MSG, id, rec)
      redis.call('ZADD', READY, 0, split(m)[2])
      n = n + 1
    end
  end
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
return {redis.call('HLEN', MSG), due, redis.call('HLEN', INFLIGHT), oldest, redis.call('ZCARD', DEADIDS)}
"#;

/// ARGV: group, which ("queued" or "dead"), after id, limit. Returns records by id.
const LIST: &str = r#"
local ids, hash
if ARGV[2] == 'dead' then ids, hash = DEADIDS, DEADMSG else ids, hash = ARRIVAL, MSG end
local found = redis.call('ZRANGEBYSCORE', ids, '(' .. ARGV[3], '+inf', 'LIMIT', 0, tonumber(ARGV[4]))
if #found == 0 then return {} end
return redis.call('HMGET', hash, unpack(found))
"#;

/// One loaded script per operation.
pub(super) struct Scripts {
    pub append: redis::Script,
    pub lease: redis::Script,
    pub ack: redis::Script,
    pub reschedule: redis::Script,
    pub kill: redis::Script,
    pub release: redis::Script,
    pub purge: redis::Script,
    pub stats: redis::Script,
    pub list: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let s = |body: &str| redis::Script::new(&format!("{COMMON}{body}"));
        Scripts {
            append: s(APPEND),
            lease: s(LEASE),
            ack: s(ACK),
            reschedule: s(RESCHEDULE),
            kill: s(KILL),
            release: s(RELEASE),
            purge: s(PURGE),
            stats: s(STATS),
            list: s(LIST),
        }
    }

    pub(super) fn all(&self) -> [&redis::Script; 9] {
        [
            &self.append,
            &self.lease,
            &self.ack,
            &self.reschedule,
            &self.kill,
            &self.release,
            &self.purge,
            &self.stats,
            &self.list,
        ]
    }
}
