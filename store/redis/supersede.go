package redisidem

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// supersedeScript is idem.Superseder.Supersede in one step. ARGV: the
// token, the new fingerprint and now (unix ms, the caller's clock). Reply
// 1: superseded; 0: no record, or it expired at now; 2: the record is in
// progress or holds another token. The retention end stays, and the key's
// Redis expiry with it: written again from now, as every transition
// writes it, it ends at the record's ExpiresAt as before.
var supersedeScript = goredis.NewScript(luaRecord + `
local k = KEYS[1]
local v = redis.call('GET', k)
if not v then
  return 0
end
local r = parse(v)
if not r then
  return malformed(k)
end
if expired(r, tonumber(ARGV[3])) then
  return 0
end
if r.state == 'in_progress' or r.token ~= ARGV[1] then
  return 2
end
if r.state ~= 'completed' and r.state ~= 'released' then
  return malformed(k)
end
r.state, r.fp, r.result, r.lease, r.updated = 'released', ARGV[2], '', ARGV[3], ARGV[3]
write(k, r, ARGV[3])
return 1
`)

// Supersede implements idem.Superseder: one script, atomic in Redis.
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	if err := checkTimes("supersede", req.Now); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := supersedeScript.Run(ctx, s.client, []string{keyOf(s.prefix, req.Key)},
		strconv.FormatInt(req.Token, 10), req.Fingerprint, nowArg(req.Now)).Int64()
	if err != nil {
		return s.fail("supersede", err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return idem.ErrNotFound
	case 2:
		return idem.ErrLeaseLost
	}
	return s.fail("supersede", fmt.Errorf("redisidem: unexpected supersede reply %d", n))
}
