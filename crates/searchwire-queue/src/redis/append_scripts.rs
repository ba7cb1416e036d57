//! The append's scripts: the de-duplication script inside each transaction of a large
//! append, the one-call script of a small one, and the receipt both write on a Sentinel
//! link. See `scripts.rs` for the conventions (`KEYS` are `Keys::all` in order, `ARGV[1]`
//! the consumer group) and `COMMON`, which [`APPEND_SMALL`] is sent after.

/// Runs inside the append's `MULTI`/`EXEC`, after the plain commands that wrote the chunk's
/// records (`S:msg`), arrival (`S:arrival`) and schedule members. ARGV: group, the
/// append's first reserved id, then per message its payload hash and id. A message whose
/// hash is queued already is a duplicate: its record, arrival and schedule member are
/// deleted again. Returns the first id, then per duplicate its position in the chunk
/// (1-based) and the queued id (the usual case: no duplicate, one `HMGET` and one `HSET`
/// for the whole chunk).
///
/// With a receipt key (`KEYS[18]`, see [`RECEIPT`]) an append sent again finds what its
/// first try stored: if the receipt is there, this chunk landed before, so everything the
/// plain commands just wrote is deleted again and the first try's answer is returned
/// (its first id and duplicates); otherwise the answer is recorded under the receipt.
///
/// The `HMGET` takes the (hash, id) pairs as they are: an id (decimal) is never a field of
/// `S:hashes` (whose fields are 32 bytes long), so every second answer is nil.
///
/// Sent whole with every append (EVAL), so it has its own short prelude, not `COMMON`.
pub(super) const APPEND: &str = r#"
local READY, DELAYED, MSG, HASHES, ARRIVAL = KEYS[3], KEYS[2], KEYS[4], KEYS[5], KEYS[11]
local RECEIPT = KEYS[18]
local sub, byte, char = string.sub, string.byte, string.char
local function unstore(hash, id)
  local rec = redis.call('HGET', MSG, id)
  if rec then
    -- The schedule member (see COMMON's skey_of).
    local skey = char(255 - byte(rec, 11)) .. sub(rec, 12, 19) .. sub(rec, 3, 10) .. hash .. id
    redis.call('ZREM', READY, skey)
    redis.call('ZREM', DELAYED, skey)
  end
  redis.call('HDEL', MSG, id)
  redis.call('ZREM', ARRIVAL, id)
end
RECEIPT_PRELUDE
if RECEIPT then
  local before = redis.call('GET', RECEIPT)
  if before then
    for k = 3, #ARGV, 2 do unstore(ARGV[k], ARGV[k + 1]) end
    redis.call('PEXPIRE', RECEIPT, RECEIPT_TTL)
    return receipt_answer(before)
  end
end
local ex = redis.call('HMGET', HASHES, unpack(ARGV, 3))
local dups = nil
for k = 1, #ex, 2 do
  if ex[k] then dups = dups or {}; dups[#dups + 1] = k end
end
local out = {tonumber(ARGV[2])}
if not dups then
  redis.call('HSET', HASHES, unpack(ARGV, 3))
else
  local pairs_, d = {}, 1
  for k = 1, #ex, 2 do
    local hash, id = ARGV[k + 2], ARGV[k + 3]
    if dups[d] == k then
      d = d + 1
      unstore(hash, id)
      out[#out + 1] = (k + 1) / 2
      out[#out + 1] = ex[k]
    else
      pairs_[#pairs_ + 1] = hash
      pairs_[#pairs_ + 1] = id
    end
  end
  if #pairs_ > 0 then redis.call('HSET', HASHES, unpack(pairs_)) end
end
if RECEIPT then record_receipt(RECEIPT, out) end
return out
"#;

/// The receipt of one append (or one chunk of it): what it answered, kept for
/// [`super::RECEIPT_TTL`] after it ran, so that the same append sent again (on a Sentinel
/// link, after its first try failed while the primary moved) answers the same instead of
/// storing its payloads a second time. Written in the same script as the messages, so it
/// replicates (and survives a failover) with them — and, unlike `S:hashes`, it outlives
/// the messages' delivery. The value is the answer as text: the first id, then the
/// (position, queued id) pairs.
pub(super) const RECEIPT: &str = r#"
local RECEIPT_TTL = RECEIPT_TTL_MS
local function receipt_answer(text)
  local out = {}
  for v in string.gmatch(text, '%S+') do
    local j = #out + 1
    -- The queued ids (3rd, 5th, ...) are strings, the first id and positions numbers.
    if j > 1 and j % 2 == 1 then out[j] = v else out[j] = tonumber(v) end
  end
  return out
end
local function record_receipt(key, out)
  local text = {string.format('%d', out[1])}
  for j = 2, #out do
    if j % 2 == 0 then text[j] = string.format('%d', out[j]) else text[j] = out[j] end
  end
  redis.call('SET', key, table.concat(text, ' '), 'PX', RECEIPT_TTL)
end
"#;

/// A small append in one call (at most [`super::RedisConfig::small_append`] messages):
/// reserves the ids, checks for duplicates and stores, atomically, so a process killed at
/// any moment leaves either the whole append or nothing (not even a gap in the ids).
/// ARGV: group, now, how many ids to reserve (the batch's length: a message's id is the
/// first reserved plus its position), then per message (distinct payloads) its position in
/// the batch (0-based), payload hash, `retry_at` and record with the id bytes zero (the
/// script writes the id in; the id bytes are 3..10 of a record, see `src/record.rs`).
/// Returns the first reserved id, then per duplicate its place among the messages
/// (1-based) and the queued id. With a receipt key (`KEYS[18]`, see [`RECEIPT`]) an append
/// sent again whose first try ran returns that try's answer and stores nothing.
///
/// The records pass through Lua here (a few KB per call); what this saves at one message
/// per call is the transaction path's separate `INCRBY` round trip, its six commands and
/// the de-duplication script's text. Ids must stay below 2^53 (Lua numbers).
pub(super) const APPEND_SMALL: &str = r#"
local SEQ, RECEIPT = KEYS[17], KEYS[18]
if RECEIPT then
  local before = redis.call('GET', RECEIPT)
  if before then
    redis.call('PEXPIRE', RECEIPT, RECEIPT_TTL)
    return receipt_answer(before)
  end
end
local now, reserve = tonumber(ARGV[2]), tonumber(ARGV[3])
local first = redis.call('INCRBY', SEQ, reserve) - reserve + 1
local hashes = {}
for i = 5, #ARGV, 4 do hashes[#hashes + 1] = ARGV[i] end
local ex = redis.call('HMGET', HASHES, unpack(hashes))
local out, recs, arrival, owned, ready, delayed = {first}, {}, {}, {}, {}, {}
for k = 1, #ex do
  local i = 4 * k
  if ex[k] then
    out[#out + 1] = k
    out[#out + 1] = ex[k]
  else
    local id = first + tonumber(ARGV[i])
    local sid, hash, retry_at, rec = string.format('%d', id), ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    rec = sub(rec, 1, 2) .. u64(id) .. sub(rec, 11)
    recs[#recs + 1] = sid
    recs[#recs + 1] = rec
    arrival[#arrival + 1] = sid
    arrival[#arrival + 1] = sid
    owned[#owned + 1] = hash
    owned[#owned + 1] = sid
    local skey = skey_of(rec, hash, sid)
    if tonumber(retry_at) <= now then
      ready[#ready + 1] = 0
      ready[#ready + 1] = skey
    else
      delayed[#delayed + 1] = retry_at
      delayed[#delayed + 1] = skey
    end
  end
end
if #recs > 0 then
  redis.call('HSET', MSG, unpack(recs))
  redis.call('ZADD', ARRIVAL, unpack(arrival))
  redis.call('HSET', HASHES, unpack(owned))
  if #ready > 0 then redis.call('ZADD', READY, unpack(ready)) end
  if #delayed > 0 then redis.call('ZADD', DELAYED, unpack(delayed)) end
end
if RECEIPT then record_receipt(RECEIPT, out) end
return out
"#;
