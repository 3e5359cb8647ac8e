package redisidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// sweepLockTTL bounds how long a crashed sweeper keeps others out. A sweep
// call takes one SCAN budget, far less than this.
const sweepLockTTL = time.Minute

// sweepScanBudget is the least number of keys one Sweep call examines before
// returning (10 per record of Limit when that is more), so a call stays
// short even when nothing is expired.
const sweepScanBudget = 1000

// sweepMaxScans bounds the SCAN calls of one Sweep (each examines about
// scanCount slots), so a call stays short in a database shared with many
// keys outside the prefix.
const sweepMaxScans = 200

// sweepPos is where the next Sweep resumes: a node and a SCAN cursor on it.
type sweepPos struct {
	node   string
	cursor uint64
}

// Sweep implements idem.Store. Redis normally removes records itself when
// their retention ends (each write sets the key's expiry to ExpiresAt - Now
// of its request), so Sweep usually finds nothing; it exists for records
// whose retention ended by the caller's clock but not yet by Redis's
// countdown. Each call holds an advisory lock (SET NX with a one-minute
// expiry; other instances get 0), resumes a SCAN over the prefix where the
// previous call of this Store stopped, examines a bounded number of keys and
// deletes at most req.Limit expired records (ExpiresAt <= req.Now, except
// those in progress under a lease live at req.Now), each with a script that
// re-checks the record so a key claimed again since the scan survives. The
// lock is the key "<prefix>:sweep-lock". A Limit of zero or less deletes
// nothing and returns 0 without contacting Redis.
//
// A call also returns early, with fewer than req.Limit deletions, once it
// has examined its share of keys (at least 1000 records under the prefix,
// or 200 SCAN calls); the next call resumes there. A short batch therefore
// does not mean the pass is over, which costs nothing here: Redis deletes
// expired records on its own.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	lk := lockKey(s.prefix)
	ok, err := s.client.SetNX(ctx, lk, token, sweepLockTTL).Result()
	if err != nil {
		return 0, s.fail("sweep lock", err)
	}
	if !ok {
		return 0, nil // another instance is sweeping
	}
	defer func() {
		// Unlock even if ctx was cancelled; the lock's expiry covers a failure.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		unlockScript.Run(uctx, s.client, []string{lk}, token)
	}()

	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	n, err := s.sweepLocked(ctx, req)
	if err != nil {
		return n, s.fail("sweep", err)
	}
	return n, nil
}

func (s *Store) sweepLocked(ctx context.Context, req idem.SweepRequest) (int, error) {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return 0, err
	}
	if len(nodes) == 0 {
		return 0, nil
	}
	i := 0
	cursor := s.sweepAt.cursor
	for j, n := range nodes {
		if n.addr == s.sweepAt.node {
			i = j
			break
		}
	}
	if nodes[i].addr != s.sweepAt.node {
		cursor = 0 // the node we stopped on is gone: restart the pass there
	}
	budget := max(sweepScanBudget, 10*req.Limit)
	pattern := recordPattern(s.prefix, "")
	deleted, examined := 0, 0
	for scans := 1; ; scans++ {
		keys, next, err := nodes[i].client.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return deleted, err
		}
		examined += len(keys)
		expired, err := s.expiredKeys(ctx, keys, req.Now)
		if err != nil {
			return deleted, err
		}
		truncated := false
		if room := req.Limit - deleted; len(expired) > room {
			expired, truncated = expired[:room], true
		}
		n, err := s.deleteExpired(ctx, expired, req.Now)
		deleted += n
		if err != nil {
			return deleted, err
		}
		if truncated {
			// Scan this batch again next time: SCAN accepts a cursor twice,
			// and the records deleted now will simply be absent.
			s.sweepAt = sweepPos{node: nodes[i].addr, cursor: cursor}
			return deleted, nil
		}
		cursor = next
		if cursor == 0 {
			i++
			if i == len(nodes) {
				// A full pass ended: the next call starts a new one.
				s.sweepAt = sweepPos{node: nodes[0].addr}
				return deleted, nil
			}
		}
		if deleted >= req.Limit || examined >= budget || scans >= sweepMaxScans {
			s.sweepAt = sweepPos{node: nodes[i].addr, cursor: cursor}
			return deleted, nil
		}
	}
}

// expiredKeys returns the keys whose records expired at now (idem.Record's
// Expired: expires_at <= now, unless in progress under a live lease),
// reading only their headers, in one pipeline.
func (s *Store) expiredKeys(ctx context.Context, keys []string, now time.Time) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.GetRange(ctx, k, 0, maxHeaderLen-1)
	}
	_, _ = pipe.Exec(ctx) // judged per command below
	var out []string
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if goredis.HasErrorPrefix(err, "WRONGTYPE") {
				continue // not a string: not a record of ours
			}
			return nil, err
		}
		h, err := splitHeader(c.Val())
		if err != nil {
			continue // gone since the scan (empty), or not a record to judge
		}
		lease, exp, _, _, err := h.times()
		if err != nil {
			continue
		}
		r := idem.Record{State: idem.State(h.fields[1]), LeaseUntil: lease, ExpiresAt: exp}
		if r.Expired(now) {
			out = append(out, keys[i])
		}
	}
	return out, nil
}

// deleteExpired runs sweepScript on keys in one pipeline and counts the
// records it deleted.
func (s *Store) deleteExpired(ctx context.Context, keys []string, now time.Time) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	calls := make([]scriptCall, len(keys))
	for i, k := range keys {
		calls[i] = scriptCall{key: k, args: []any{nowArg(now)}}
	}
	cmds, err := s.evalPipelined(ctx, sweepScript, calls)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cmds {
		if v, _ := c.Int64(); v == 1 {
			n++
		}
	}
	return n, nil
}
