package lincheck

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// OpsEnv names the environment variable that sets the number of operations
// of a run whose Options.Ops is zero (the -lincheck.ops flag wins over it).
const OpsEnv = "IDEM_LINCHECK_OPS"

// DefaultOps is the number of operations of a run when neither Options.Ops,
// the -lincheck.ops flag nor IDEM_LINCHECK_OPS sets one: brief enough for
// every test run.
const DefaultOps = 400

var opsFlag = flag.Int("lincheck.ops", 0, "operations per linearizability check (0: "+OpsEnv+" or the default)")

// Options shape one run. The zero value is a brief run.
type Options struct {
	// Ops is the number of Store calls to make (a ClaimBatch counts as one).
	// Zero: the -lincheck.ops flag, else IDEM_LINCHECK_OPS, else DefaultOps.
	Ops int
	// Clients is the number of goroutines calling the store at once
	// (default 8).
	Clients int
	// Keys is the number of keys they share (default 4): few, so that they
	// contend.
	Keys int
	// Seed seeds the choice of operations (zero: a random seed, logged).
	// The interleaving is the scheduler's, so a seed does not replay a run.
	Seed uint64
	// OpTimeout bounds one call (default 10 s); a call that times out
	// has an unknown outcome, like one that returned a store error.
	OpTimeout time.Duration
	// CheckTimeout bounds the linearizability search (default 2 min);
	// a search that does not finish fails the check.
	CheckTimeout time.Duration
	// MaxUnknown is the largest share of calls that may end with a store
	// error or a timeout (default 0.25): a history made mostly of unknown
	// outcomes proves little, so more fails the run.
	MaxUnknown float64
	// ReportDir is where a violation's history and visualization files go
	// (default: the system's temporary directory, so they outlive the test).
	ReportDir string
}

// ops is the number of operations the run makes.
func (o Options) ops() (int, error) {
	switch {
	case o.Ops > 0:
		return o.Ops, nil
	case *opsFlag > 0:
		return *opsFlag, nil
	}
	if v := os.Getenv(OpsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("lincheck: %s=%q is not a positive number of operations", OpsEnv, v)
		}
		return n, nil
	}
	return DefaultOps, nil
}

func (o Options) withDefaults() Options {
	if o.Clients <= 0 {
		o.Clients = 8
	}
	if o.Keys <= 0 {
		o.Keys = 4
	}
	if o.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = 2 * time.Minute
	}
	if o.MaxUnknown <= 0 {
		o.MaxUnknown = 0.25
	}
	return o
}

// The fake clock. Every request carries its Now (the caller's clock is the
// one clock of idem), read from a clock that moves one tick per read, so
// that it runs as fast as the store answers: a lease of 20 to 100 ms lasts
// about one to three of its owner's calls on any store, and retentions end
// within a few dozen calls on the key. A store's native expiry counts real
// time instead (a Redis TTL: the duration from the request's Now to its
// ExpiresAt); the model knows the real time of every call (see deletable).
const tick = 4 * time.Millisecond

// base is the fake clock's start: whole seconds, far from the real time, so
// a store that consults its own clock shows up.
var base = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

type clock struct {
	start time.Time
	reads atomic.Int64
}

// now returns the fake time in milliseconds after base.
func (c *clock) now() int64 {
	return (time.Duration(c.reads.Add(1)) * tick).Milliseconds()
}

func at(t int64) time.Time { return base.Add(time.Duration(t) * time.Millisecond) }

// History is what a run recorded: every call with its input, its answer and
// its real call and return times.
type History struct {
	keys    []idem.Key
	ops     []porcupine.Operation
	counts  map[string]int
	errs    []string // the first store errors, for the report
	unknown int
	calls   int
	elapsed time.Duration
	opts    Options
}

// Record drives s with opts.Clients goroutines making opts.Ops calls of
// Claim (one by one or in a ClaimBatch when s is an storekit.BatchStore),
// Complete, Release, Renew, Get, Sweep and Supersede (when s is an
// idem.Superseder) over opts.Keys keys, with fresh, stale, stolen and
// guessed tokens, and returns the history. It fails only when
// opts is invalid; store errors are part of the history.
func Record(ctx context.Context, s idem.Store, opts Options) (*History, error) {
	n, err := opts.ops()
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	opts.Ops = n
	var sb [4]byte
	_, _ = rand.Read(sb[:])
	scope := "lincheck-" + hex.EncodeToString(sb[:])
	h := &History{counts: map[string]int{}, opts: opts}
	for i := range opts.Keys {
		h.keys = append(h.keys, idem.Key{Scope: scope, ID: "k" + strconv.Itoa(i)})
	}
	r := &recorder{h: h, s: s, clk: &clock{start: time.Now()}, budget: int64(n)}
	r.batch, _ = s.(storekit.BatchStore)
	r.sup, _ = s.(idem.Superseder)
	var wg sync.WaitGroup
	for c := range opts.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.client(ctx, c, mrand.New(mrand.NewPCG(opts.Seed, uint64(c))))
		}()
	}
	wg.Wait()
	h.elapsed = time.Since(r.clk.start)
	sort.Slice(h.ops, func(i, j int) bool { return h.ops[i].Call < h.ops[j].Call })
	return h, nil
}

type recorder struct {
	h      *History
	s      idem.Store
	batch  storekit.BatchStore
	sup    idem.Superseder // nil: supersedes are left out
	clk    *clock
	budget int64
	mu     sync.Mutex // guards h's slices and counts
	nextID atomic.Int64
}

// since is the real time of a call or return, in nanoseconds of the run.
func (r *recorder) since() int64 { return time.Since(r.clk.start).Nanoseconds() }

// client is one goroutine's loop. It holds at most one claim per key (the
// token of its last acquired claim) and remembers tokens it has seen, its
// own old ones and those of other owners, to send as zombies.
func (r *recorder) client(ctx context.Context, id int, rng *mrand.Rand) {
	keys := len(r.h.keys)
	held := make([]int64, keys)   // 0: none
	seen := make([][]int64, keys) // tokens seen per key, most recent last
	see := func(k int, tok int64) {
		if tok == 0 {
			return
		}
		seen[k] = append(seen[k], tok)
		if len(seen[k]) > 8 {
			seen[k] = seen[k][1:]
		}
	}
	zombie := func(k int) int64 {
		if len(seen[k]) == 0 {
			return storekit.NewToken()
		}
		// Mostly a token seen (perhaps still the owner's), sometimes one
		// next to it, as a counter off by one would send.
		return seen[k][rng.IntN(len(seen[k]))] + int64(rng.IntN(5)/4*(rng.IntN(3)-1))
	}
	for atomic.AddInt64(&r.budget, -1) >= 0 {
		// Half the calls go back to a key the client holds, as a
		// consumer finishes what it claimed.
		k := rng.IntN(keys)
		if h := heldKeys(held); len(h) > 0 && rng.IntN(2) == 0 {
			k = h[rng.IntN(len(h))]
		}
		mix := strangerMix
		if held[k] != 0 {
			mix = ownerMix
		}
		c := mix[rng.IntN(len(mix))]
		if c.kind == opSupersede && r.sup == nil {
			c.kind = opGet
		}
		switch c.kind {
		case opComplete, opRelease, opRenew:
			tok := held[k]
			if c.zombie || tok == 0 {
				tok = zombie(k)
			}
			ok, lost := r.finish(ctx, id, c.kind, k, tok, rng)
			if c.kind != opRenew {
				see(k, tok)
			}
			if tok == held[k] && (lost || ok && c.kind != opRenew) {
				held[k] = 0
			}
		case opClaim:
			for _, c := range r.claim(ctx, id, k, rng) {
				see(c.key, c.rec.token)
				if c.outcome == idem.ClaimAcquired {
					see(c.key, held[c.key])
					held[c.key] = c.rec.token
				}
			}
		case opGet:
			if rec, ok := r.get(ctx, id, k); ok {
				see(k, rec.token)
			}
		case opSweep:
			r.sweep(ctx, id, 1+rng.IntN(3))
		case opSupersede:
			// An operator sends the token of the record as read: mostly
			// one seen, sometimes the client's own claim's.
			tok := zombie(k)
			if !c.zombie && held[k] != 0 {
				tok = held[k]
			}
			r.supersede(ctx, id, k, tok, rng)
		}
	}
}

func heldKeys(held []int64) []int {
	var out []int
	for k, tok := range held {
		if tok != 0 {
			out = append(out, k)
		}
	}
	return out
}

// choice is one entry of a client's mix of operations; zombie sends a token
// other than the one the client holds.
type choice struct {
	kind   kind
	zombie bool
}

// ownerMix is the mix of a client holding a claim on the key, strangerMix
// of one holding none, each choice listed as often as its weight.
var (
	ownerMix = mix(map[choice]int{
		{opComplete, false}: 6, {opRelease, false}: 2, {opRenew, false}: 3, {opClaim, false}: 4,
		{opGet, false}: 2, {opComplete, true}: 2, {opRenew, true}: 1, {opSweep, false}: 1,
		{opSupersede, false}: 1,
	})
	strangerMix = mix(map[choice]int{
		{opClaim, false}: 11, {opGet, false}: 3, {opComplete, true}: 3, {opRelease, true}: 1, {opRenew, true}: 2,
		{opSweep, false}: 1, {opSupersede, true}: 2,
	})
)

// mix lists each choice as often as its weight, in a fixed order.
func mix(w map[choice]int) []choice {
	var out []choice
	for c, n := range w {
		for range n {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].kind != out[j].kind {
			return out[i].kind < out[j].kind
		}
		return !out[i].zombie && out[j].zombie
	})
	return out
}

// claimed is a claim's answer as the client uses it.
type claimed struct {
	key     int
	outcome idem.ClaimOutcome
	rec     record
}

var fingerprints = []string{"", "fp-a", "fp-b"}

// accepted are the contents an operator supersedes with (never empty: a
// request without one is invalid data).
var accepted = []string{"fp-a", "fp-b", "fp-c"}

func (r *recorder) claimInput(k int, rng *mrand.Rand) input {
	now := r.clk.now()
	lease := now + 20 + rng.Int64N(80)
	return input{
		kind: opClaim, key: k, now: now, lease: lease, expires: lease + 60 + rng.Int64N(200),
		fp: fingerprints[rng.IntN(len(fingerprints))], takeOver: rng.IntN(3) > 0,
		newToken: storekit.NewToken(),
	}
}

func claimRequest(key idem.Key, in input) idem.ClaimRequest {
	return idem.ClaimRequest{
		Key: key, Fingerprint: in.fp, Now: at(in.now), LeaseUntil: at(in.lease), ExpiresAt: at(in.expires),
		TakeOverStale: in.takeOver, NewToken: in.newToken,
	}
}

// claim claims key k alone, or with one or two other keys in a ClaimBatch
// when the store has one.
func (r *recorder) claim(ctx context.Context, client, k int, rng *mrand.Rand) []claimed {
	ins := []input{r.claimInput(k, rng)}
	if r.batch != nil && rng.IntN(6) == 0 {
		for _, j := range rng.Perm(len(r.h.keys))[:min(len(r.h.keys), 1+rng.IntN(3))] {
			if j != k {
				in := r.claimInput(j, rng)
				in.now = ins[0].now
				ins = append(ins, in)
			}
		}
	}
	reqs := make([]idem.ClaimRequest, len(ins))
	for i, in := range ins {
		ins[i].batch = len(ins) > 1
		reqs[i] = claimRequest(r.h.keys[in.key], in)
	}
	ctx, cancel := context.WithTimeout(ctx, r.h.opts.OpTimeout)
	defer cancel()
	call := r.since()
	var (
		cs  []idem.Claim
		err error
	)
	if len(reqs) == 1 {
		var c idem.Claim
		c, err = r.s.Claim(ctx, reqs[0])
		cs = []idem.Claim{c}
	} else {
		cs, err = r.batch.ClaimBatch(ctx, reqs)
		if err == nil && len(cs) != len(reqs) {
			err = fmt.Errorf("ClaimBatch returned %d claims for %d requests", len(cs), len(reqs))
		}
	}
	ret := r.since()
	var out []claimed
	for i, in := range ins {
		var o output
		if err != nil {
			o = r.unknown(err)
		} else {
			o = output{outcome: cs[i].Outcome, retaken: cs[i].Retaken, rec: fromRecord(cs[i].Record, base)}
			o.wrongKey = r.checkKey(cs[i].Record, in.key)
			out = append(out, claimed{in.key, o.outcome, o.rec})
		}
		r.add(client, in, o, call, ret, "claim:"+outcomeName(o))
	}
	r.mu.Lock()
	r.h.calls++
	r.mu.Unlock()
	return out
}

func outcomeName(o output) string {
	if o.unknown {
		return "unknown"
	}
	s := o.outcome.String()
	if o.retaken {
		s += "_retaken"
	}
	return s
}

// checkKey describes a returned record that names a key other than k.
func (r *recorder) checkKey(rec idem.Record, k int) string {
	want := r.h.keys[k]
	if rec.Scope != want.Scope || rec.ID != want.StoredID() {
		return rec.Scope + "/" + rec.ID
	}
	return ""
}

// finish calls Complete, Release or Renew with token tok. It reports
// whether the call succeeded and whether it answered ErrLeaseLost.
func (r *recorder) finish(ctx context.Context, client int, op kind, k int, tok int64, rng *mrand.Rand) (ok, lost bool) {
	now := r.clk.now()
	in := input{kind: op, key: k, now: now, token: tok}
	key := r.h.keys[k]
	ctx, cancel := context.WithTimeout(ctx, r.h.opts.OpTimeout)
	defer cancel()
	var err error
	call := r.since()
	switch op {
	case opComplete:
		in.expires = now + 60 + rng.Int64N(140)
		in.result = "r" + strconv.FormatInt(r.nextID.Add(1), 10)
		err = r.s.Complete(ctx, idem.CompleteRequest{Key: key, Token: tok, Result: []byte(in.result), Now: at(now), ExpiresAt: at(in.expires)})
	case opRelease:
		err = r.s.Release(ctx, idem.ReleaseRequest{Key: key, Token: tok, Now: at(now)})
	case opRenew:
		in.lease = now + 20 + rng.Int64N(80)
		err = r.s.Renew(ctx, idem.RenewRequest{Key: key, Token: tok, Now: at(now), LeaseUntil: at(in.lease)})
	}
	ret := r.since()
	var o output
	name := op.String() + ":ok"
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrLeaseLost):
		o.leaseLost, name = true, op.String()+":lease_lost"
	default:
		o, name = r.unknown(err), op.String()+":unknown"
	}
	r.add(client, in, o, call, ret, name)
	r.mu.Lock()
	r.h.calls++
	r.mu.Unlock()
	return err == nil, o.leaseLost
}

// supersede asks the store to make one of the accepted contents key k's,
// under token tok.
func (r *recorder) supersede(ctx context.Context, client, k int, tok int64, rng *mrand.Rand) {
	in := input{kind: opSupersede, key: k, now: r.clk.now(), token: tok, fp: accepted[rng.IntN(len(accepted))]}
	ctx, cancel := context.WithTimeout(ctx, r.h.opts.OpTimeout)
	defer cancel()
	call := r.since()
	err := r.sup.Supersede(ctx, idem.SupersedeRequest{Key: r.h.keys[k], Token: tok, Fingerprint: in.fp, Now: at(in.now)})
	ret := r.since()
	var o output
	name := "supersede:ok"
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrLeaseLost):
		o.leaseLost, name = true, "supersede:lease_lost"
	case errors.Is(err, idem.ErrNotFound):
		o.notFound, name = true, "supersede:not_found"
	default:
		o, name = r.unknown(err), "supersede:unknown"
	}
	r.add(client, in, o, call, ret, name)
	r.mu.Lock()
	r.h.calls++
	r.mu.Unlock()
}

// get reads key k. A failed read changed nothing and is left out of the
// history.
func (r *recorder) get(ctx context.Context, client, k int) (record, bool) {
	in := input{kind: opGet, key: k, now: r.clk.now()}
	ctx, cancel := context.WithTimeout(ctx, r.h.opts.OpTimeout)
	defer cancel()
	call := r.since()
	rec, err := r.s.Get(ctx, r.h.keys[k])
	ret := r.since()
	var o output
	switch {
	case err == nil:
		o.rec, o.wrongKey = fromRecord(rec, base), r.checkKey(rec, k)
		r.add(client, in, o, call, ret, "get:found")
	case errors.Is(err, idem.ErrNotFound):
		o.notFound = true
		r.add(client, in, o, call, ret, "get:not_found")
	default:
		r.mu.Lock()
		r.h.counts["get:error"]++
		r.noteErr(err)
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.h.calls++
	r.mu.Unlock()
	return o.rec, err == nil
}

// sweep deletes at most limit expired records. It is one call on every
// key, so the history holds a copy of it in each key's partition.
func (r *recorder) sweep(ctx context.Context, client, limit int) {
	now := r.clk.now()
	ctx, cancel := context.WithTimeout(ctx, r.h.opts.OpTimeout)
	defer cancel()
	call := r.since()
	n, err := r.s.Sweep(ctx, idem.SweepRequest{Now: at(now), Limit: limit})
	ret := r.since()
	o, name := output{swept: n}, "sweep:deleted_"+strconv.Itoa(n)
	if err != nil {
		o, name = r.unknown(err), "sweep:unknown"
	}
	for k := range r.h.keys {
		r.add(client, input{kind: opSweep, key: k, now: now, limit: limit}, o, call, ret, "")
	}
	r.mu.Lock()
	r.h.counts[name]++
	r.h.calls++
	r.mu.Unlock()
}

// unknown is the output of a call that failed: it may have taken effect,
// so it stays pending to the end of the history.
func (r *recorder) unknown(err error) output {
	r.mu.Lock()
	r.noteErr(err)
	r.h.unknown++
	r.mu.Unlock()
	return output{unknown: true, err: err.Error()}
}

func (r *recorder) noteErr(err error) {
	if len(r.h.errs) < 5 {
		r.h.errs = append(r.h.errs, err.Error())
	}
}

func (r *recorder) add(client int, in input, o output, call, ret int64, name string) {
	if o.unknown {
		ret = math.MaxInt64
	}
	in.call, o.ret = call, ret
	r.mu.Lock()
	defer r.mu.Unlock()
	in.id = len(r.h.ops)
	r.h.ops = append(r.h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: o, Return: ret})
	if name != "" {
		r.h.counts[name]++
	}
}

// Summary is one line of figures about the history: calls, unknown
// outcomes, time, and how often each answer came.
func (h *History) Summary() string {
	names := make([]string, 0, len(h.counts))
	for n := range h.counts {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls (%d operations) by %d clients on %d keys in %v, %d unknown outcomes, seed %d:",
		h.calls, len(h.ops), h.opts.Clients, len(h.keys), h.elapsed.Round(time.Millisecond), h.unknown, h.opts.Seed)
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, h.counts[n])
	}
	if len(h.errs) > 0 {
		fmt.Fprintf(&b, "; first store errors: %s", strings.Join(h.errs, "; "))
	}
	return b.String()
}

// Unknown is the number of calls that failed with a store error or timed
// out, whose outcome the check leaves open.
func (h *History) Unknown() int { return h.unknown }

// Calls is the number of Store calls the history holds (a ClaimBatch counts
// once, failed Gets too).
func (h *History) Calls() int { return h.calls }
