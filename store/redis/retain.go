package redisidem

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Retainer = (*Store)(nil)

// retainScript is idem.Retainer.Retain in one step. ARGV: the token, the
// new expires_at and now (unix ms, the caller's clock). Reply 1: retained
// (or kept that long already); 0: no record, or it expired at now; 2: the
// record is not completed under the token. A raised expiry moves the key's
// Redis expiry with it, measured from now as Complete sets it.
var retainScript = goredis.NewScript(luaRecord + `
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
if r.state ~= 'completed' or r.token ~= ARGV[1] then
  return 2
end
if r.exp ~= '' and tonumber(r.exp) < tonumber(ARGV[2]) then
  r.exp = ARGV[2]
  write(k, r, ARGV[3])
end
return 1
`)

// Retain implements idem.Retainer: one script, atomic in Redis. The key's
// Redis expiry becomes ExpiresAt - Now (from the caller's clock), as
// Complete sets it.
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	if err := checkTimes("retain", req.Now, req.ExpiresAt); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := retainScript.Run(ctx, s.client, []string{keyOf(s.prefix, req.Key)},
		strconv.FormatInt(req.Token, 10), msArg(roundMs(req.ExpiresAt)), nowArg(req.Now)).Int64()
	if err != nil {
		return s.fail("retain", err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return idem.ErrNotFound
	case 2:
		return idem.ErrLeaseLost
	}
	return s.fail("retain", fmt.Errorf("redisidem: unexpected retain reply %d", n))
}
