package redisidem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/countdown"
	"github.com/idemgo/idem/store/storekit"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "idem"

// maxPrefixLen bounds Options.Prefix; it is repeated in every key.
const maxPrefixLen = 64

// Options configure a Store. The zero value works.
type Options struct {
	// Prefix starts every key the store writes ("<prefix>:{scope:id}").
	// Default "idem". Letters, digits and . _ - : / only, at most 64 bytes:
	// no braces (they would change the cluster hash tag) and no glob
	// characters (the store scans by prefix).
	Prefix string
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	return o
}

func (o Options) validate() error {
	if len(o.Prefix) > maxPrefixLen {
		return fmt.Errorf("%w: redisidem: prefix longer than %d bytes", idem.ErrInvalidOptions, maxPrefixLen)
	}
	for i := 0; i < len(o.Prefix); i++ {
		c := o.Prefix[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == ':' || c == '/'
		if !ok {
			return fmt.Errorf("%w: redisidem: prefix %q has %q (allowed: letters, digits, . _ - : /)",
				idem.ErrInvalidOptions, o.Prefix, c)
		}
	}
	return nil
}

// Store is an idem.Store on Redis. It is safe for concurrent use; create one
// per client and prefix with New.
type Store struct {
	client goredis.UniversalClient
	prefix string

	held    heldClaims          // claims this Store acquired and still holds
	dupGet  countdown.Countdown // claims read existing keys in their SET (dupGetClaims)
	flights flights             // coalesces concurrent fenced scripts

	sweepMu sync.Mutex // one Sweep at a time in this process; guards sweepPos
	sweepAt sweepPos
}

var (
	_ idem.Store          = (*Store)(nil)
	_ storekit.BatchStore = (*Store)(nil)
	_ idem.Inspector      = (*Store)(nil)
)

// New returns a store on client (a *redis.Client, *redis.ClusterClient,
// sentinel failover client or *redis.Ring). It does not contact Redis.
func New(client goredis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisidem: nil client", idem.ErrInvalidOptions)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{client: client, prefix: opts.Prefix}, nil
}

// Prefix returns the key prefix in use.
func (s *Store) Prefix() string { return s.prefix }

// Key returns the Redis key holding k's record (for operators and tests).
func (s *Store) Key(k idem.Key) string { return keyOf(s.prefix, k) }

// Claim implements idem.Store. An absent key is claimed by one SET NX, no
// script. How an existing key is read depends on what this Store has met
// lately:
//
//   - While claims find new keys (the usual stream), the SET NX has no GET:
//     its reply to a new key is then OK rather than a nil, which go-redis
//     handles through its error path, and that cost a quarter of a claim's
//     client CPU (BENCH.md). A key that exists (the reply is nil) goes
//     through claimScript, a second round trip.
//   - For the dupGetClaims claims after one that met an existing key (a
//     redelivery, a replayed partition), the SET NX carries GET: the same
//     command returns the current record, and when that record calls for no
//     write (duplicate, in progress, parked stale) that snapshot is the
//     answer, in one round trip.
//
// Either way only transitions that rewrite a record (retake, reclaim after
// release or expiry) run claimScript, which checks the rules again
// atomically.
//
// The record a claim writes carries req.NewToken (drawn by Prepare), and the
// key has no Redis expiry while the record is in progress: an in-progress
// record never expires (past its lease it is stale, for the Stale policy),
// so no countdown may remove it. Complete and Release set the key's expiry
// to ExpiresAt - Now (at least 1 ms): a duration from the caller's clock,
// never an absolute time.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	if err := checkClaim("claim", req); err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	key := keyOf(s.prefix, req.Key)
	rec := freshRecord(req)
	fresh := encodeRecord(rec)
	var (
		c    idem.Claim
		done bool
	)
	if s.dupGet.Active() {
		cmd := s.client.Do(ctx, setNXGetArgs(key, fresh)...)
		c, done, err = decodeSetNXGet(req, rec, cmd)
		if existed := !done || (err == nil && c.Outcome != idem.ClaimAcquired); existed {
			s.dupGet.Start(dupGetClaims)
		}
	} else {
		err = s.client.Do(ctx, setNXArgs(key, fresh)...).Err()
		switch {
		case err == nil:
			c, done = idem.Claim{Outcome: idem.ClaimAcquired, Record: rec}, true
		case errors.Is(err, goredis.Nil):
			err = nil // the key exists: claimScript reads and decides
			s.dupGet.Start(dupGetClaims)
		}
	}
	if err != nil {
		return idem.Claim{}, s.fail("claim", err)
	}
	value := fresh
	if !done {
		reply, err := claimScript.Run(ctx, s.client, []string{key}, claimArgs(req, fresh)...).Result()
		if err != nil {
			return idem.Claim{}, s.fail("claim", err)
		}
		if c, value, err = decodeClaim(reply); err != nil {
			return idem.Claim{}, s.fail("claim", err)
		}
	}
	s.held.acquired(key, c, value)
	return c, nil
}

// dupGetClaims is how many claims after one that met an existing key
// carry GET in their SET (Store.dupGet), so that a run of redeliveries is
// answered in one round trip each; other claims leave it out, so that new
// keys get the cheaper OK reply.
const dupGetClaims = 64

// setNXArgs is the claim of an absent key alone: write fresh only if the
// key does not exist, with no Redis expiry (an in-progress record never
// expires; Complete and Release give the key its expiry). The reply is OK,
// or nil when the key exists.
func setNXArgs(key, fresh string) []any {
	return []any{"set", key, fresh, "nx"}
}

// setNXGetArgs is the claim of an absent key: write fresh only if the key
// does not exist, and return what it held otherwise (Redis 7.0+).
func setNXGetArgs(key, fresh string) []any {
	return []any{"set", key, fresh, "nx", "get"}
}

// decodeSetNXGet interprets the SET NX GET reply: acquired when the key was
// absent; the snapshot's outcome when it needs no write; done=false when
// the claim must go through claimScript.
func decodeSetNXGet(req idem.ClaimRequest, fresh idem.Record, cmd *goredis.Cmd) (c idem.Claim, done bool, err error) {
	v, err := cmd.Text()
	if errors.Is(err, goredis.Nil) {
		return idem.Claim{Outcome: idem.ClaimAcquired, Record: fresh}, true, nil
	}
	if err != nil {
		return idem.Claim{}, true, err
	}
	cur, err := decodeRecord(v)
	if err != nil {
		return idem.Claim{}, true, err
	}
	c, write := storekit.ApplyClaim(&cur, req)
	return c, !write, nil
}

func claimArgs(req idem.ClaimRequest, fresh string) []any {
	take := "0"
	if req.TakeOverStale {
		take = "1"
	}
	return []any{nowArg(req.Now), take, fresh}
}

// decodeClaim interprets claimScript's reply and returns the record's
// stored value too.
func decodeClaim(reply any) (idem.Claim, string, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) != 3 {
		return idem.Claim{}, "", fmt.Errorf("redisidem: unexpected claim reply %v", reply)
	}
	code, _ := arr[0].(int64)
	v, _ := arr[1].(string)
	retaken, _ := arr[2].(int64)
	r, err := decodeRecord(v)
	if err != nil {
		return idem.Claim{}, "", err
	}
	c := idem.Claim{Record: r, Retaken: retaken == 1}
	switch code {
	case replyAcquired:
		c.Outcome = idem.ClaimAcquired
	case replyDuplicate:
		c.Outcome = idem.ClaimDuplicate
	case replyInProgress:
		c.Outcome = idem.ClaimInProgress
	case replyStale:
		c.Outcome = idem.ClaimStale
	default:
		return idem.Claim{}, "", fmt.Errorf("redisidem: unexpected claim reply code %v", arr[0])
	}
	return c, v, nil
}

// fenced runs a complete/release/renew script and maps its 0 reply to
// idem.ErrLeaseLost. When this Store holds the claim (it claimed or renewed
// it under token), it sends the value it expects and the transition's
// result, with the key's expiry measured from now, so the script can
// compare-and-set without parsing; change turns the held record into the
// new one.
func (s *Store) fenced(ctx context.Context, op string, script *goredis.Script, k idem.Key, token int64,
	now time.Time, change func(*idem.Record), args ...any) (idem.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, false, err
	}
	key := keyOf(s.prefix, k)
	var expected, next, ttl string
	h, ok := s.held.take(key, token)
	if ok {
		change(&h.rec)
		expected, next, ttl = h.value, encodeRecord(h.rec), ttlArg(h.rec, now)
	}
	all := append([]any{strconv.FormatInt(token, 10), expected, next, ttl}, args...)
	n, err := s.flights.run(s.client, &fencedCall{ctx: ctx, script: script, key: key, args: all})
	if err != nil {
		return idem.Record{}, false, s.fail(op, err)
	}
	if n != 1 {
		return idem.Record{}, false, idem.ErrLeaseLost
	}
	return h.rec, ok, nil
}

// Complete implements idem.Store: fenced by token and state, and moves the
// key's Redis expiry to the new retention end (ExpiresAt - Now from now).
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	if err := checkTimes("complete", req.Now, req.ExpiresAt); err != nil {
		return err
	}
	exp := roundMs(req.ExpiresAt)
	_, _, err = s.fenced(ctx, "complete", completeScript, req.Key, req.Token, req.Now, func(r *idem.Record) {
		r.State, r.Result, r.ExpiresAt, r.UpdatedAt = idem.StateCompleted, req.Result, exp, roundMs(req.Now)
	}, req.Result, msArg(exp), nowArg(req.Now))
	return err
}

// Release implements idem.Store. The record keeps its fingerprint and its
// retention end (the key's Redis expiry is set again from req.Now). A zero
// Now is an *idem.InvalidDataError, as for the other transitions.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if _, err := storekit.PrepareRelease(req); err != nil {
		return err
	}
	if err := checkTimes("release", req.Now); err != nil {
		return err
	}
	now := roundMs(req.Now)
	_, _, err := s.fenced(ctx, "release", releaseScript, req.Key, req.Token, req.Now, func(r *idem.Record) {
		r.State, r.LeaseUntil, r.UpdatedAt = idem.StateReleased, now, now
	}, nowArg(req.Now))
	return err
}

// Renew implements idem.Store: the lease moves to req.LeaseUntil and the
// retention end to the later of itself and the new lease end. The key keeps
// no Redis expiry (the record is in progress), so it never vanishes,
// however long its handler runs.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	if err := checkTimes("renew", req.Now, req.LeaseUntil); err != nil {
		return err
	}
	lease := roundMs(req.LeaseUntil)
	r, held, err := s.fenced(ctx, "renew", renewScript, req.Key, req.Token, req.Now, func(r *idem.Record) {
		r.LeaseUntil, r.UpdatedAt = lease, roundMs(req.Now)
		if !r.ExpiresAt.IsZero() {
			r.ExpiresAt = storekit.Later(r.ExpiresAt, lease)
		}
	}, msArg(lease), nowArg(req.Now))
	if err == nil && held {
		s.held.put(keyOf(s.prefix, req.Key), r, "")
	}
	return err
}

// Get implements idem.Store. It returns records whose retention ended by the
// caller's clock as long as Redis still holds them.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	v, err := s.client.Get(ctx, keyOf(s.prefix, key)).Result()
	if errors.Is(err, goredis.Nil) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, s.fail("get", err)
	}
	r, err := decodeRecord(v)
	if err != nil {
		return idem.Record{}, s.fail("get", err)
	}
	return r, nil
}

// ClaimBatch implements storekit.BatchStore: one pipeline of SET NX GET, one
// round trip (per cluster node), plus a second pipeline of claim scripts for
// the keys whose records need a rewrite (retake, reclaim). Each claim is atomic on its own; the batch
// is not a transaction. Every request is Prepare'd first (its own fresh
// token); a request Prepare refuses fails the whole batch before anything
// is sent. On any error no claim is reported: claims the server applied
// before the failure stay in progress until their lease ends, then are
// retaken.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	if err := storekit.CheckBatchKeys("claim batch", reqs); err != nil {
		return nil, err
	}
	prepared := make([]idem.ClaimRequest, len(reqs))
	for i, r := range reqs {
		r, err := storekit.PrepareClaim(r)
		if err != nil {
			return nil, err
		}
		if err := checkClaim("claim batch", r); err != nil {
			return nil, err
		}
		prepared[i] = r
	}
	reqs = prepared
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	keys := make([]string, len(reqs))
	recs := make([]idem.Record, len(reqs))
	fresh := make([]string, len(reqs))
	setCmds := make([]*goredis.Cmd, len(reqs))
	pipe := s.client.Pipeline()
	for i, r := range reqs {
		keys[i] = keyOf(s.prefix, r.Key)
		recs[i] = freshRecord(r)
		fresh[i] = encodeRecord(recs[i])
		setCmds[i] = pipe.Do(ctx, setNXGetArgs(keys[i], fresh[i])...)
	}
	// Exec's error is the first failed command's; redis.Nil (key was absent)
	// is no failure, so each command is judged on its own.
	_, _ = pipe.Exec(ctx)
	out := make([]idem.Claim, len(reqs))
	var (
		slow  []int
		calls []scriptCall
	)
	for i, r := range reqs {
		c, done, err := decodeSetNXGet(r, recs[i], setCmds[i])
		if err != nil {
			return nil, s.fail("claim batch", err)
		}
		if done {
			out[i] = c
			s.held.acquired(keys[i], c, fresh[i])
			continue
		}
		slow = append(slow, i)
		calls = append(calls, scriptCall{key: keys[i], args: claimArgs(r, fresh[i])})
	}
	if len(calls) == 0 {
		return out, nil
	}
	cmds, err := s.evalPipelined(ctx, claimScript, calls)
	if err != nil {
		return nil, s.fail("claim batch", err)
	}
	for j, i := range slow {
		var value string
		if out[i], value, err = decodeClaim(cmds[j].Val()); err != nil {
			return nil, s.fail("claim batch", err)
		}
		s.held.acquired(keys[i], out[i], value)
	}
	return out, nil
}

// scriptCall is one script run in a pipeline.
type scriptCall struct {
	key  string
	args []any
}

// evalPipelined runs script once per call in one pipeline and returns the
// commands in call order. EVALSHA fails with NOSCRIPT on a server that has
// not seen the script (a restart, a failover, a new cluster node); those
// calls did not run, so they alone are sent again as EVAL with the source,
// which also caches the script on whichever node runs it (SCRIPT LOAD would
// reach one node only on some clients). Calls that ran are never repeated:
// a repeated claim would find its own record in progress. Any other error
// fails the whole call.
func (s *Store) evalPipelined(ctx context.Context, script *goredis.Script, calls []scriptCall) ([]*goredis.Cmd, error) {
	cmds := make([]*goredis.Cmd, len(calls))
	pipe := s.client.Pipeline()
	for i, c := range calls {
		cmds[i] = script.EvalSha(ctx, pipe, []string{c.key}, c.args...)
	}
	if _, err := pipe.Exec(ctx); err == nil {
		return cmds, nil
	}
	var missing []int
	for i, c := range cmds {
		switch err := c.Err(); {
		case err == nil:
		case isNoScript(err):
			missing = append(missing, i)
		default:
			return nil, err
		}
	}
	if len(missing) == 0 {
		return cmds, nil
	}
	pipe = s.client.Pipeline()
	for _, i := range missing {
		cmds[i] = script.Eval(ctx, pipe, []string{calls[i].key}, calls[i].args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, i := range missing {
			if err := cmds[i].Err(); err != nil {
				return nil, err
			}
		}
	}
	return cmds, nil
}

func isNoScript(err error) bool {
	return errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT")
}
