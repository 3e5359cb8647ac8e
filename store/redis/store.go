package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
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
		return fmt.Errorf("%w: redisstore: prefix longer than %d bytes", idem.ErrInvalidOptions, maxPrefixLen)
	}
	for i := 0; i < len(o.Prefix); i++ {
		c := o.Prefix[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == ':' || c == '/'
		if !ok {
			return fmt.Errorf("%w: redisstore: prefix %q has %q (allowed: letters, digits, . _ - : /)",
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

	sweepMu sync.Mutex // one Sweep at a time in this process; guards sweepPos
	sweepAt sweepPos
}

var (
	_ idem.Store      = (*Store)(nil)
	_ idem.BatchStore = (*Store)(nil)
	_ idem.Inspector  = (*Store)(nil)
)

// New returns a store on client (a *redis.Client, *redis.ClusterClient,
// sentinel failover client or *redis.Ring). It does not contact Redis.
func New(client goredis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: nil client", idem.ErrInvalidOptions)
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

// wrap labels a Redis failure with the operation. The error stays
// inspectable (errors.Is(err, context.Canceled), redis.Error, net.Error).
func wrap(op string, err error) error { return fmt.Errorf("redisstore: %s: %w", op, err) }

// Claim implements idem.Store with one script run.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	reply, err := claimScript.Run(ctx, s.client, []string{keyOf(s.prefix, req.Key)}, claimArgs(req)...).Result()
	if err != nil {
		return idem.Claim{}, wrap("claim", err)
	}
	return decodeClaim(req, reply)
}

// fenced runs a complete/release/renew script and maps its 0 reply to
// idem.ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, script *goredis.Script, k idem.Key, args ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := script.Run(ctx, s.client, []string{keyOf(s.prefix, k)}, args...).Int64()
	if err != nil {
		return wrap(op, err)
	}
	if n != 1 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Complete implements idem.Store: fenced by token and state, and moves the
// key's Redis expiry to the new retention end.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	return s.fenced(ctx, "complete", completeScript, req.Key,
		strconv.FormatInt(req.Token, 10), req.Result, msArg(req.ExpiresAt), nowArg(req.Now))
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	return s.fenced(ctx, "release", releaseScript, req.Key, strconv.FormatInt(req.Token, 10), nowArg(req.Now))
}

// Renew implements idem.Store.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	return s.fenced(ctx, "renew", renewScript, req.Key,
		strconv.FormatInt(req.Token, 10), msArg(req.LeaseUntil), nowArg(req.Now))
}

// Get implements idem.Store. It returns records whose retention ended by the
// caller's clock as long as Redis still holds them.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	vals, err := s.client.HMGet(ctx, keyOf(s.prefix, key), recordFields...).Result()
	if err != nil {
		return idem.Record{}, wrap("get", err)
	}
	r, found, err := decodeRecord(vals)
	if err != nil {
		return idem.Record{}, err
	}
	if !found {
		return idem.Record{}, idem.ErrNotFound
	}
	return r, nil
}

// ClaimBatch implements idem.BatchStore: one pipeline of claim scripts, one
// round trip (per cluster node). Each claim is atomic on its own; the batch
// is not a transaction. On any error no claim is reported: claims the server
// applied before the failure stay in progress until their lease ends, then
// are retaken.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	calls := make([]scriptCall, len(reqs))
	for i, r := range reqs {
		calls[i] = scriptCall{key: keyOf(s.prefix, r.Key), args: claimArgs(r)}
	}
	cmds, err := s.evalPipelined(ctx, claimScript, calls)
	if err != nil {
		return nil, wrap("claim batch", err)
	}
	out := make([]idem.Claim, len(reqs))
	for i, cmd := range cmds {
		if out[i], err = decodeClaim(reqs[i], cmd.Val()); err != nil {
			return nil, err
		}
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
// calls did not run, so they alone are sent again after loading the script
// (calls that ran are never repeated: a repeated claim would find its own
// record in progress). Any other error fails the whole call.
func (s *Store) evalPipelined(ctx context.Context, script *goredis.Script, calls []scriptCall) ([]*goredis.Cmd, error) {
	cmds := make([]*goredis.Cmd, len(calls))
	pending := make([]int, len(calls))
	for i := range calls {
		pending[i] = i
	}
	for attempt := 0; ; attempt++ {
		pipe := s.client.Pipeline()
		for _, i := range pending {
			cmds[i] = script.EvalSha(ctx, pipe, []string{calls[i].key}, calls[i].args...)
		}
		_, err := pipe.Exec(ctx)
		if err == nil {
			return cmds, nil
		}
		var retry []int
		for _, i := range pending {
			cerr := cmds[i].Err()
			switch {
			case cerr == nil:
			case isNoScript(cerr):
				retry = append(retry, i)
			default:
				return nil, cerr
			}
		}
		if len(retry) == 0 {
			return nil, err
		}
		if attempt > 0 {
			return nil, fmt.Errorf("script still missing after loading it: %w", cmds[retry[0]].Err())
		}
		if err := script.Load(ctx, s.client).Err(); err != nil {
			return nil, err
		}
		pending = retry
	}
}

func isNoScript(err error) bool {
	return errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT")
}
