package redisstore

import goredis "github.com/redis/go-redis/v9"

// The scripts below are the whole of the store's write logic. Each touches
// only KEYS[1] (one record, one slot) and runs atomically in Redis, so no
// interleaving of clients can break a transition. Times arrive as unix
// milliseconds in ARGV (the caller's clock, never Redis's: TIME is not used);
// a zero time is the empty string. Tokens are compared as the decimal strings
// HINCRBY writes, which avoids Lua's float formatting of large numbers.

// recordFields is the HMGET order of a full record, shared by claimScript's
// replies and decodeRecord.
var recordFields = []string{
	fieldScope, fieldID, fieldDisplay, fieldState, fieldFingerprint, fieldResult,
	fieldToken, fieldAttempts, fieldLeaseUntil, fieldExpiresAt, fieldCreatedAt, fieldUpdatedAt,
}

// Hash field names (documented in the package doc for operators).
const (
	fieldScope       = "scope"
	fieldID          = "id"
	fieldDisplay     = "display_id" // only when the id was hashed
	fieldState       = "state"
	fieldFingerprint = "fingerprint"
	fieldResult      = "result"
	fieldToken       = "token"
	fieldAttempts    = "attempts"
	fieldLeaseUntil  = "lease_until"
	fieldExpiresAt   = "expires_at"
	fieldCreatedAt   = "created_at"
	fieldUpdatedAt   = "updated_at"
)

// Claim reply codes (first element of claimScript's reply).
const (
	replyAcquired   = 1
	replyDuplicate  = 2
	replyInProgress = 3
	replyStale      = 4
)

// claimScript is idem.ApplyClaim in one step.
//
// ARGV: now, lease_until, expires_at, fingerprint, take over stale ("1"/"0"),
// scope, stored id, display id ("" when equal to the stored id).
//
// Reply: {1, retaken (0/1), token, attempts, created_at, fingerprint} when
// acquired, which is all the caller does not know already; otherwise
// {code, <recordFields values>}.
var claimScript = goredis.NewScript(`
local k = KEYS[1]
local now = tonumber(ARGV[1])
local cur = redis.call('HMGET', k, 'state', 'expires_at', 'lease_until')
local state = cur[1]

local function full(code)
  return {code, redis.call('HMGET', k, 'scope', 'id', 'display_id', 'state', 'fingerprint', 'result',
    'token', 'attempts', 'lease_until', 'expires_at', 'created_at', 'updated_at')}
end

local function acquire(retaken)
  redis.call('HSET', k, 'state', 'in_progress', 'lease_until', ARGV[2], 'expires_at', ARGV[3],
    'updated_at', ARGV[1])
  if ARGV[3] == '' then
    redis.call('PERSIST', k)
  else
    redis.call('PEXPIREAT', k, ARGV[3])
  end
  local r = redis.call('HMGET', k, 'token', 'attempts', 'created_at', 'fingerprint')
  return {1, retaken, r[1], r[2], r[3], r[4]}
end

local exp = tonumber(cur[2])
if state and not (exp and exp <= now) then
  if state == 'completed' then
    return full(2)
  end
  if state == 'in_progress' then
    local lease = tonumber(cur[3])
    if lease and now < lease then
      return full(3)
    end
    if ARGV[5] ~= '1' then
      return full(4)
    end
    -- Retake: the stored fingerprint is kept (it describes the content the
    -- first owner may have acted on).
    redis.call('HINCRBY', k, 'token', 1)
    redis.call('HINCRBY', k, 'attempts', 1)
    return acquire(1)
  end
  if state == 'released' then
    redis.call('HINCRBY', k, 'token', 1)
    redis.call('HINCRBY', k, 'attempts', 1)
    redis.call('HSET', k, 'fingerprint', ARGV[4])
    redis.call('HDEL', k, 'result')
    return acquire(0)
  end
  return redis.error_reply('idem: record ' .. k .. ' has unknown state ' .. tostring(state))
end

-- Absent or expired: a fresh record. An expired record Redis has not removed
-- yet passes its token on, so tokens keep increasing.
redis.call('HDEL', k, 'result', 'display_id')
redis.call('HSET', k, 'scope', ARGV[6], 'id', ARGV[7], 'fingerprint', ARGV[4], 'attempts', 1,
  'created_at', ARGV[1])
if ARGV[8] ~= '' then
  redis.call('HSET', k, 'display_id', ARGV[8])
end
redis.call('HINCRBY', k, 'token', 1)
return acquire(0)
`)

// completeScript: ARGV token, result, expires_at, now. Reply 1, or 0 when
// the token is not current or the record is not in progress.
var completeScript = goredis.NewScript(`
local k = KEYS[1]
local cur = redis.call('HMGET', k, 'state', 'token')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', k, 'state', 'completed', 'result', ARGV[2], 'expires_at', ARGV[3], 'updated_at', ARGV[4])
if ARGV[3] == '' then
  redis.call('PERSIST', k)
else
  redis.call('PEXPIREAT', k, ARGV[3])
end
return 1
`)

// releaseScript: ARGV token, now. Reply 1 or 0 as completeScript.
var releaseScript = goredis.NewScript(`
local k = KEYS[1]
local cur = redis.call('HMGET', k, 'state', 'token')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', k, 'state', 'released', 'lease_until', ARGV[2], 'updated_at', ARGV[2])
return 1
`)

// renewScript: ARGV token, lease_until, now. Reply 1 or 0 as completeScript.
var renewScript = goredis.NewScript(`
local k = KEYS[1]
local cur = redis.call('HMGET', k, 'state', 'token')
if cur[1] ~= 'in_progress' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', k, 'lease_until', ARGV[2], 'updated_at', ARGV[3])
return 1
`)

// sweepScript deletes the record if its retention ended at ARGV now (it
// re-checks, so a record reclaimed since the scan survives). Reply 1 when
// deleted.
var sweepScript = goredis.NewScript(`
local e = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))
if e and e <= tonumber(ARGV[1]) then
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
