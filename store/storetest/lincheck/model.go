package lincheck

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgo/idem"
)

// kind names a Store method.
type kind uint8

const (
	opClaim kind = iota + 1
	opComplete
	opRelease
	opRenew
	opGet
	opSweep     // on every key: the history holds one copy per key
	opSupersede // an operator's idem.Superseder call (stores that have it)
)

func (k kind) String() string {
	return [...]string{"?", "claim", "complete", "release", "renew", "get", "sweep", "supersede"}[k]
}

// input is one call as the history records it. Times are milliseconds
// after the run's base time (whole milliseconds, which every store keeps).
type input struct {
	id       int   // the operation's number in the history, for the report
	call     int64 // real time of the call, ns of the run
	kind     kind
	key      int // index into the run's keys
	now      int64
	lease    int64  // claim, renew: LeaseUntil
	expires  int64  // claim, complete: ExpiresAt
	fp       string // claim; supersede: the new content
	takeOver bool
	newToken int64 // claim: the token of a record the claim creates
	token    int64 // complete, release, renew, supersede: the token presented
	result   string
	batch    bool // claim sent in a ClaimBatch
	limit    int  // sweep: SweepRequest.Limit
}

// output is what the store answered. unknown marks a call that failed with
// a store error or a timeout: it may have taken effect or not, so the model
// accepts any effect it may have had, and its return time is the end of time.
type output struct {
	unknown   bool
	err       string // the error of an unknown call, for the report
	outcome   idem.ClaimOutcome
	retaken   bool
	rec       record // claim and get
	notFound  bool   // get, supersede: ErrNotFound
	leaseLost bool   // complete, release, renew, supersede: ErrLeaseLost
	wrongKey  string // a returned record naming another key
	swept     int    // sweep: records deleted, of all keys
	ret       int64  // real time of the return, ns of the run (the end of time when unknown)
}

// record is the model's state of one key: a comparable value (porcupine
// compares states with ==). Times of a lease are kept only while the record
// is in progress, where the contract gives them meaning.
type record struct {
	present  bool
	state    idem.State
	token    int64
	attempts int
	fp       string
	result   string
	lease    int64 // LeaseUntil, in progress only
	expires  int64
	created  int64
	// ttlEnd is the real time (ns of the run) before which a native
	// expiry cannot have deleted the record: the call time of the request
	// that last wrote it plus the time from its Now to the record's
	// ExpiresAt, the duration a Redis TTL counts (never, in progress).
	// Answers never carry it.
	ttlEnd int64
}

// expired is the contract's Record.Expired: only a settled record (completed,
// released) expires, when its retention has ended. An in-progress record
// never does: past its lease it is stale, for the Stale policy.
func (r record) expired(now int64) bool {
	return r.state != idem.StateInProgress && r.expires <= now
}

// deletable reports whether something other than the calls of the history
// may have deleted p before the call in answered out: p had expired by the
// call's clock (anything may delete an expired record), or a native expiry
// counted in real time from the request that wrote p may have run out by
// the time the call returned (a call that read its clock before a stall
// meets the deletion with a Now before ExpiresAt).
func deletable(p record, in input, out output) bool {
	return p.present && (p.expired(in.now) || out.ret >= p.ttlEnd)
}

// apply is one operation of the sequential specification on the key's
// record p: the answer the store must give and the record after it. The
// rules are the idem.Store contract's, written out again here rather than
// taken from storekit.ApplyClaim, so the memory store (which uses it) is checked
// against an independent reading of the contract.
func apply(p record, in input) (output, record) {
	switch in.kind {
	case opClaim:
		return applyClaim(p, in)
	case opComplete, opRelease, opRenew:
		if !p.present || p.state != idem.StateInProgress || p.token != in.token {
			return output{leaseLost: true}, p
		}
		n := p
		switch in.kind {
		case opComplete:
			n.state, n.result, n.expires, n.lease = idem.StateCompleted, in.result, in.expires, 0
		case opRelease:
			n.state, n.lease = idem.StateReleased, 0
		case opRenew:
			n.lease, n.expires = in.lease, max(p.expires, in.lease)
		}
		return output{}, written(n, in)
	case opGet:
		if !p.present {
			return output{notFound: true}, p
		}
		return output{rec: p}, p
	case opSweep:
		return output{}, p // the record kept; step adds its deletion
	case opSupersede:
		return applySupersede(p, in)
	}
	panic("lincheck: unknown operation kind")
}

// written is n as the call in wrote it, with the end of its native expiry:
// none while in progress (an in-progress record never expires, so no TTL
// may remove it), else counted from the call.
func written(n record, in input) record {
	n.ttlEnd = in.call + (n.expires-in.now)*int64(time.Millisecond)
	if n.state == idem.StateInProgress {
		n.ttlEnd = math.MaxInt64
	}
	return n
}

func applyClaim(p record, in input) (output, record) {
	acquire := func(n record, retaken bool) (output, record) {
		n.state, n.lease, n.expires, n.result = idem.StateInProgress, in.lease, max(in.expires, in.lease), ""
		n = written(n, in)
		return output{outcome: idem.ClaimAcquired, retaken: retaken, rec: n}, n
	}
	switch {
	case !p.present:
		return acquire(record{present: true, token: in.newToken, attempts: 1, fp: in.fp, created: in.now}, false)
	case p.expired(in.now):
		// A record that survived its retention starts a new lifetime
		// that keeps counting its tokens.
		return acquire(record{present: true, token: p.token + 1, attempts: 1, fp: in.fp, created: in.now}, false)
	case p.state == idem.StateReleased:
		n := p
		n.token++
		n.attempts++
		if n.fp == "" {
			n.fp = in.fp
		}
		return acquire(n, false)
	case p.state == idem.StateCompleted:
		return output{outcome: idem.ClaimDuplicate, rec: p}, p
	case in.now < p.lease:
		return output{outcome: idem.ClaimInProgress, rec: p}, p
	case !in.takeOver:
		return output{outcome: idem.ClaimStale, rec: p}, p
	}
	n := p
	n.token++
	n.attempts++
	return acquire(n, true)
}

// applySupersede is idem.Superseder's rule: a settled record under the
// token takes the new content, released, without its result; token,
// attempts, creation and retention stay.
func applySupersede(p record, in input) (output, record) {
	switch {
	case !p.present || p.expired(in.now):
		return output{notFound: true}, p
	case p.state == idem.StateInProgress || p.token != in.token:
		return output{leaseLost: true}, p
	}
	n := p
	n.state, n.fp, n.result, n.lease = idem.StateReleased, in.fp, "", 0
	// The retention is kept, and a native expiry with it: kept as it was
	// (a TTL field) or written again from this call's Now to the same
	// ExpiresAt (a Redis TTL). The earlier of the two ends is the bound.
	n.ttlEnd = min(p.ttlEnd, written(n, in).ttlEnd)
	return output{}, n
}

// same reports whether the store's answer got is the one the specification
// gives, want.
func same(k kind, want, got output) bool {
	if got.wrongKey != "" {
		return false
	}
	want.rec.ttlEnd = 0
	switch k {
	case opClaim:
		return want.outcome == got.outcome && want.retaken == got.retaken && want.rec == got.rec
	case opGet:
		return want.notFound == got.notFound && (want.notFound || want.rec == got.rec)
	case opSupersede:
		return want.notFound == got.notFound && want.leaseLost == got.leaseLost
	}
	return want.leaseLost == got.leaseLost
}

// step is the nondeterministic model's step. Besides the operation, the
// store may have deleted the key's record before it (see deletable): the
// contract allows that, and a claim then starts at its NewToken.
func step(state, in0, out0 any) []any {
	s, in, out := state.(record), in0.(input), out0.(output)
	if in.kind == opSweep {
		// Which keys a sweep deleted is not known, only how many: on
		// each key it may have deleted a record expired at its Now.
		if deletable(s, in, out) {
			return []any{s, record{}}
		}
		return []any{s}
	}
	var next []any
	try := func(p record) {
		want, n := apply(p, in)
		if out.unknown || same(in.kind, want, out) {
			next = append(next, n)
		}
	}
	try(s)
	if deletable(s, in, out) {
		try(record{})
	}
	return next
}

// model is the porcupine model of one Store, partitioned by key: the
// contract holds per key, so each key's history is checked alone.
func model(keys []idem.Key) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := make([][]porcupine.Operation, len(keys))
			for _, op := range h {
				k := op.Input.(input).key
				by[k] = append(by[k], op)
			}
			out := by[:0]
			for _, p := range by {
				if len(p) > 0 {
					out = append(out, p)
				}
			}
			return out
		},
		Init:  func() []any { return []any{record{}} },
		Step:  step,
		Equal: func(a, b any) bool { return a.(record) == b.(record) },
		Hash: func(s any) uint64 {
			r := s.(record)
			h := fnv.New64a()
			fmt.Fprint(h, r.present, r.state, r.token, r.attempts, r.fp, r.result, r.lease, r.expires, r.created)
			return h.Sum64()
		},
		DescribeOperation: func(in, out any) string {
			return describeInput(in.(input)) + " → " + describeOutput(in.(input).kind, out.(output))
		},
		DescribeState: func(s any) string { return s.(record).String() },
	}
	return nm.ToModel()
}

// ms renders a time of the run as milliseconds after its base.
func ms(t int64) string { return fmt.Sprintf("+%dms", t) }

// String renders a record of the model or of a store's answer.
func (r record) String() string {
	if !r.present {
		return "absent"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s token=%d attempts=%d fp=%q", r.state, r.token, r.attempts, r.fp)
	if r.state == idem.StateInProgress {
		fmt.Fprintf(&b, " lease=%s", ms(r.lease))
	}
	if r.result != "" {
		fmt.Fprintf(&b, " result=%q", r.result)
	}
	fmt.Fprintf(&b, " expires=%s created=%s", ms(r.expires), ms(r.created))
	if r.ttlEnd != 0 {
		fmt.Fprintf(&b, " ttl-end=%dµs", r.ttlEnd/1e3)
	}
	return b.String()
}

func describeInput(in input) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s now=%s", in.id, in.kind, ms(in.now))
	switch in.kind {
	case opClaim:
		fmt.Fprintf(&b, " lease=%s expires=%s fp=%q takeOver=%t newToken=%d", ms(in.lease), ms(in.expires), in.fp, in.takeOver, in.newToken)
		if in.batch {
			b.WriteString(" (batch)")
		}
	case opComplete:
		fmt.Fprintf(&b, " token=%d expires=%s result=%q", in.token, ms(in.expires), in.result)
	case opRelease:
		fmt.Fprintf(&b, " token=%d", in.token)
	case opRenew:
		fmt.Fprintf(&b, " token=%d lease=%s", in.token, ms(in.lease))
	case opSweep:
		fmt.Fprintf(&b, " limit=%d", in.limit)
	case opSupersede:
		fmt.Fprintf(&b, " token=%d fp=%q", in.token, in.fp)
	}
	return b.String()
}

func describeOutput(k kind, out output) string {
	switch {
	case out.unknown:
		return "unknown (" + out.err + ")"
	case out.wrongKey != "":
		return "record of another key: " + out.wrongKey
	}
	switch k {
	case opClaim:
		s := out.outcome.String()
		if out.retaken {
			s += " (retaken)"
		}
		return s + " {" + out.rec.String() + "}"
	case opGet:
		if out.notFound {
			return "not found"
		}
		return "{" + out.rec.String() + "}"
	case opSupersede:
		if out.notFound {
			return "ErrNotFound"
		}
	case opSweep:
		return fmt.Sprintf("%d deleted (of all keys)", out.swept)
	}
	if out.leaseLost {
		return "ErrLeaseLost"
	}
	return "ok"
}

// fromRecord is a store's record as the model sees it, times in
// milliseconds after base.
func fromRecord(r idem.Record, base time.Time) record {
	at := func(t time.Time) int64 { return t.Sub(base).Round(time.Millisecond).Milliseconds() }
	m := record{
		present: true, state: r.State, token: r.Token, attempts: r.Attempts, fp: r.Fingerprint,
		result: string(r.Result), expires: at(r.ExpiresAt), created: at(r.CreatedAt),
	}
	if r.State == idem.StateInProgress {
		m.lease = at(r.LeaseUntil)
	}
	return m
}
