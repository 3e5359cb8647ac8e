package redisidem

import goredis "github.com/redis/go-redis/v9"

// The scripts below are the store's write transitions. Each touches only
// KEYS[1] (one record, one slot) and runs atomically in Redis, so no
// interleaving of clients can break a transition. Times arrive as unix
// milliseconds in ARGV (the caller's clock, never Redis's: TIME is not used);
// a zero time is the empty string. Tokens are compared as decimal strings.
// An in-progress record's key has no Redis expiry (an in-progress record
// never expires: past its lease it is stale, for the Stale policy); a
// settled record's expiry is always set relative to the request's now (PX
// expires_at - now, at least 1 ms), never at an absolute time: Redis's clock
// then only measures how long a record lives, which every clock agrees on,
// not when, which a caller's clock may put an hour away.
//
// Lua counts in doubles. Every number a script writes goes through
// string.format('%d', ...) (never tostring, which prints 1e+15), and tokens
// stay below 2^53 (inc refuses to count past it), so they stay exact.

// luaRecord parses and writes the format of record.go. parse returns nil for
// a value it does not understand; the scripts then fail loudly rather than
// overwrite it.
const luaRecord = `
local function parse(v)
  local st, tok, att, lease, exp, cr, up, lfp, ls, li, ld, pos = string.match(v,
    '^1|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|()')
  lfp = tonumber(lfp)
  local n = lfp and tonumber(ls) and tonumber(li) and tonumber(ld) and tonumber(tok) and tonumber(att)
  if not n then
    return nil
  end
  n = lfp + tonumber(ls) + tonumber(li) + tonumber(ld)
  return {state = st, token = tok, attempts = att, lease = lease, exp = exp, created = cr, updated = up,
    fp = string.sub(v, pos, pos + lfp - 1), lens = ls .. '|' .. li .. '|' .. ld,
    ident = string.sub(v, pos + lfp, pos + n - 1), result = string.sub(v, pos + n)}
end

-- ttl is the key's expiry for a retention ending at exp, measured from
-- now (both unix ms, the caller's clock): at least 1 ms, an integer.
local function ttl(exp, now)
  local ms = tonumber(exp) - tonumber(now)
  if ms < 1 then
    ms = 1
  end
  return string.format('%d', ms)
end

-- write stores r with the key's expiry at its retention end, measured
-- from now; an in-progress record gets none (SET drops the old one), so
-- Redis never removes a run that is live or stale.
local function write(k, r, now)
  local v = table.concat({'1', r.state, r.token, r.attempts, r.lease, r.exp, r.created, r.updated,
    string.format('%d', string.len(r.fp)), r.lens, ''}, '|') .. r.fp .. r.ident .. r.result
  if r.exp == '' or r.state == 'in_progress' then
    redis.call('SET', k, v)
  else
    redis.call('SET', k, v, 'PX', ttl(r.exp, now))
  end
  return v
end

-- inc is the decimal string n + 1. Doubles are exact below 2^53; a token
-- at the edge is refused rather than rounded (a rounded token could equal
-- a zombie's).
local function inc(n)
  local x = tonumber(n) + 1
  if x >= 9007199254740992 then
    error({err = 'idem: token ' .. n .. ' is too large to count on (2^53 or more)'})
  end
  return string.format('%d', x)
end

-- expired: a settled record whose retention ended at now. An in-progress
-- record never expires: past its lease it is stale, for the Stale policy.
local function expired(r, now)
  if r.state == 'in_progress' then
    return false
  end
  local exp = tonumber(r.exp)
  return exp ~= nil and exp <= now
end

local function malformed(k)
  return redis.error_reply('idem: malformed record at ' .. k)
end
`

// Claim reply codes (first element of claimScript's reply).
const (
	replyAcquired   = 1
	replyDuplicate  = 2
	replyInProgress = 3
	replyStale      = 4
)

// claimScript is storekit.ApplyClaim in one step, for keys that hold a record
// (absent keys are claimed by SET NX, with or without GET, without a
// script).
//
// ARGV: now, take over stale ("1"/"0"), the fresh record value (the
// request's token, fingerprint, lease and retention) written when the key
// is absent or expired.
//
// Reply: {code, record value after the step, retaken (0/1)}.
var claimScript = goredis.NewScript(luaRecord + `
local k = KEYS[1]
local now = tonumber(ARGV[1])
local fresh = parse(ARGV[3])
local v = redis.call('GET', k)
if not v then
  return {1, write(k, fresh, now), 0}
end
local r = parse(v)
if not r then
  return malformed(k)
end
if expired(r, now) then
  -- Settled, expired but not yet removed by Redis: a new lifetime (the
  -- request's fingerprint) that keeps counting tokens from the old one.
  fresh.token = inc(r.token)
  return {1, write(k, fresh, now), 0}
end
if r.state == 'completed' then
  return {2, v, 0}
end
if r.state == 'in_progress' then
  local lease = tonumber(r.lease)
  if lease and now < lease then
    return {3, v, 0}
  end
  if ARGV[2] ~= '1' then
    return {4, v, 0}
  end
  -- Retake: the stored fingerprint is kept (it describes the content the
  -- first owner may have acted on).
  r.token, r.attempts = inc(r.token), inc(r.attempts)
  r.lease, r.exp, r.updated = fresh.lease, fresh.exp, ARGV[1]
  return {1, write(k, r, now), 1}
end
if r.state == 'released' then
  -- Released means "may be retried", not "content forgotten": the stored
  -- fingerprint stays (the request's only fills an empty one).
  r.state, r.token, r.attempts = 'in_progress', inc(r.token), inc(r.attempts)
  if r.fp == '' then
    r.fp = fresh.fp
  end
  r.result = ''
  r.lease, r.exp, r.updated = fresh.lease, fresh.exp, ARGV[1]
  return {1, write(k, r, now), 0}
end
return malformed(k)
`)

// fencedPrelude starts Complete, Release and Renew. ARGV[1] is the
// caller's token; ARGV[2] the record value this client last saw under that
// token (or ""), ARGV[3] the value to write in its place and ARGV[4] the
// key's expiry for it (milliseconds from the request's now, "" for none).
//
// Fast path: the stored value is still exactly ARGV[2], so nobody has
// touched the record since this client claimed (or renewed) it; it is in
// progress under ARGV[1] and ARGV[3] is the transition, computed by the
// client: a compare-and-set with no parsing. Otherwise the record is parsed
// and checked (ending the script with 0 unless it is in progress under
// ARGV[1]) and the script's own transition follows.
//
// The fast path comes before luaRecord so that it does not even pay for
// defining the parsing functions.
const fencedPrelude = `
local k = KEYS[1]
local v = redis.call('GET', k)
if not v then
  return 0
end
if v == ARGV[2] then
  if ARGV[4] == '' then
    redis.call('SET', k, ARGV[3])
  else
    redis.call('SET', k, ARGV[3], 'PX', ARGV[4])
  end
  return 1
end
` + luaRecord + `
local r = parse(v)
if not r then
  return malformed(k)
end
if r.state ~= 'in_progress' or r.token ~= ARGV[1] then
  return 0
end
`

// completeScript: ARGV 1-4 as fencedPrelude, then result, expires_at, now.
// Reply 1, or 0 when the token is not current or the record is not in
// progress. The key's Redis expiry moves to the new retention end.
var completeScript = goredis.NewScript(fencedPrelude + `
r.state, r.result, r.exp, r.updated = 'completed', ARGV[5], ARGV[6], ARGV[7]
write(k, r, ARGV[7])
return 1
`)

// releaseScript: ARGV 1-4 as fencedPrelude, then now. Reply as
// completeScript. The fingerprint stays.
var releaseScript = goredis.NewScript(fencedPrelude + `
r.state, r.lease, r.updated = 'released', ARGV[5], ARGV[5]
write(k, r, ARGV[5])
return 1
`)

// renewScript: ARGV 1-4 as fencedPrelude, then lease_until, now. Reply as
// completeScript. The retention end moves to the new lease end when that is
// later; the key keeps no Redis expiry (the record stays in progress).
var renewScript = goredis.NewScript(fencedPrelude + `
r.lease, r.updated = ARGV[5], ARGV[6]
if r.exp ~= '' and tonumber(r.exp) < tonumber(ARGV[5]) then
  r.exp = ARGV[5]
end
write(k, r, ARGV[6])
return 1
`)

// sweepScript deletes the record if it expired at ARGV now (see expired: an
// in-progress record, live or stale, never does). It re-checks, so a
// record claimed again since the scan survives. Reply 1 when deleted.
var sweepScript = goredis.NewScript(luaRecord + `
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local r = parse(v)
if r and expired(r, tonumber(ARGV[1])) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// unlockScript releases the sweep lock only for its holder (ARGV token).
var unlockScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
