package lincheck

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/idemgo/idem"
)

// Hand-written histories of one key, each with the verdict the contract
// gives: the model accepts what the contract allows and nothing else.

const t1, t2 = 1<<40 + 7, 1<<41 + 3 // NewTokens of two claims

func claimIn(now int64, newToken int64) input {
	return input{kind: opClaim, now: now, lease: now + 50, expires: now + 100, fp: "fp-a", takeOver: true, newToken: newToken}
}

func inProgress(token int64, attempts int, now, created int64) record {
	return record{present: true, state: idem.StateInProgress, token: token, attempts: attempts, fp: "fp-a",
		lease: now + 50, expires: now + 100, created: created}
}

func acquired(r record) output { return output{outcome: idem.ClaimAcquired, rec: r} }
func retaken(r record) output  { return output{outcome: idem.ClaimAcquired, retaken: true, rec: r} }
func inProg(r record) output   { return output{outcome: idem.ClaimInProgress, rec: r} }
func completeIn(now, token int64) input {
	return input{kind: opComplete, now: now, token: token, expires: now + 100, result: "done"}
}
func completed(r record, now int64) record {
	r.state, r.result, r.expires, r.lease = idem.StateCompleted, "done", now+100, 0
	return r
}

// op is one call on client c over the real interval [call, ret]; a negative
// ret is an unknown outcome (pending to the end).
func op(c int, call, ret int64, in input, out output) porcupine.Operation {
	if ret < 0 {
		ret, out = math.MaxInt64, output{unknown: true, err: "timeout"}
	}
	in.call, out.ret = call, ret
	return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: in, Output: out}
}

// releaseThenClaim: a claim of fp-a released, then claimed with fp-b; the
// store answers with the fingerprint stored.
func releaseThenClaim(stored string) []porcupine.Operation {
	return []porcupine.Operation{
		op(0, 0, 1, claimIn(0, t1), acquired(inProgress(t1, 1, 0, 0))),
		op(0, 2, 3, input{kind: opRelease, now: 5, token: t1}, output{}),
		op(1, 4, 5, input{kind: opClaim, now: 6, lease: 56, expires: 106, fp: "fp-b", newToken: t2},
			acquired(record{present: true, state: idem.StateInProgress, token: t1 + 1, attempts: 2, fp: stored, lease: 56, expires: 106})),
	}
}

// supersedeThenClaim: a claim of fp-a completed, superseded with fp-b (the
// store answering out), then claimed with fp-a; the store answers with the
// fingerprint stored.
func supersedeThenClaim(out output, stored string) []porcupine.Operation {
	return []porcupine.Operation{
		op(0, 0, 1, claimIn(0, t1), acquired(inProgress(t1, 1, 0, 0))),
		op(0, 2, 3, completeIn(5, t1), output{}),
		op(1, 4, 5, input{kind: opSupersede, now: 6, token: t1, fp: "fp-b"}, out),
		op(1, 6, 7, input{kind: opClaim, now: 7, lease: 57, expires: 107, fp: "fp-a", newToken: t2},
			acquired(record{present: true, state: idem.StateInProgress, token: t1 + 1, attempts: 2, fp: stored, lease: 57, expires: 107})),
	}
}

func check(t *testing.T, ops []porcupine.Operation) error {
	for i := range ops {
		in := ops[i].Input.(input)
		in.id = i
		ops[i].Input = in
	}
	h := &History{keys: []idem.Key{{Scope: "s", ID: "k"}}, ops: ops, opts: Options{ReportDir: t.TempDir()}.withDefaults()}
	return h.Check()
}

func TestModel(t *testing.T) {
	fresh := inProgress(t1, 1, 0, 0)
	retake := inProgress(t1+1, 2, 60, 0)
	tests := []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"ClaimCompleteDuplicate", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, 3, completeIn(10, t1), output{}),
			op(1, 4, 5, claimIn(20, t2), output{outcome: idem.ClaimDuplicate, rec: completed(fresh, 10)}),
		}, true},
		{"TwoClaimersBothAcquire", []porcupine.Operation{
			op(0, 0, 10, claimIn(0, t1), acquired(fresh)),
			op(1, 1, 11, claimIn(1, t2), acquired(inProgress(t2, 1, 1, 1))),
		}, false},
		{"ConcurrentClaimsOneWinner", []porcupine.Operation{
			op(0, 0, 10, claimIn(0, t1), inProg(inProgress(t2, 1, 1, 1))),
			op(1, 1, 11, claimIn(1, t2), acquired(inProgress(t2, 1, 1, 1))),
		}, true},
		{"RetakeAfterLease", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, claimIn(60, t2), retaken(retake)),
			op(0, 4, 5, completeIn(70, t1), output{leaseLost: true}),
			op(1, 6, 7, completeIn(71, t1+1), output{}),
		}, true},
		{"ZombieCompleteAccepted", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, claimIn(60, t2), retaken(retake)),
			op(0, 4, 5, completeIn(70, t1), output{}),
		}, false},
		{"RetakeWithinLease", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, claimIn(40, t2), retaken(inProgress(t1+1, 2, 40, 0))),
		}, false},
		{"ExpiredRecordDeleted", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, 3, completeIn(10, t1), output{}),
			op(1, 4, 5, input{kind: opGet, now: 110}, output{notFound: true}),
			op(1, 6, 7, claimIn(120, t2), acquired(inProgress(t2, 1, 120, 120))),
		}, true},
		{"ExpiredRecordSurvives", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, 3, completeIn(10, t1), output{}),
			op(1, 4, 5, claimIn(120, t2), acquired(inProgress(t1+1, 1, 120, 120))),
		}, true},
		// Only settled records expire: an in-progress record past its lease
		// and its ExpiresAt is stale, neither deleted nor reborn.
		{"StaleRecordDeleted", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, input{kind: opGet, now: 100}, output{notFound: true}),
		}, false},
		{"StaleRecordReborn", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 4, 5, claimIn(110, t2), acquired(inProgress(t1+1, 1, 110, 110))),
		}, false},
		{"LiveRecordDeleted", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, input{kind: opGet, now: 99}, output{notFound: true}),
		}, false},
		{"NativeExpiryMetAfterStall", []porcupine.Operation{
			// The completed record's TTL (100 ms from the completion's
			// call) runs out while a Get that read its clock at +50ms is
			// held up.
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, 3, completeIn(10, t1), output{}),
			op(1, 4, 2e8, input{kind: opGet, now: 50}, output{notFound: true}),
		}, true},
		{"NoNativeExpiryInProgress", []porcupine.Operation{
			// An in-progress record has no TTL: a stalled Get must find it.
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 2e8, input{kind: opGet, now: 50}, output{notFound: true}),
		}, false},
		{"NativeExpiryMetEarly", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 9e7, input{kind: opGet, now: 50}, output{notFound: true}),
		}, false},
		{"SweepDeletesExpired", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, 3, completeIn(10, t1), output{}),
			op(1, 4, 5, input{kind: opSweep, now: 110, limit: 1}, output{swept: 1}),
			op(1, 6, 7, input{kind: opGet, now: 100}, output{notFound: true}),
		}, true},
		{"SweepDeletesStale", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, input{kind: opSweep, now: 100, limit: 1}, output{swept: 1}),
			op(1, 4, 5, input{kind: opGet, now: 90}, output{notFound: true}),
		}, false},
		{"SweepDeletesLive", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, input{kind: opSweep, now: 99, limit: 1}, output{swept: 1}),
			op(1, 4, 5, input{kind: opGet, now: 99}, output{notFound: true}),
		}, false},
		{"UnknownClaimTookEffect", []porcupine.Operation{
			op(0, 0, -1, claimIn(0, t1), output{}),
			op(1, 5, 6, input{kind: opGet, now: 10}, output{rec: fresh}),
		}, true},
		{"UnknownClaimNeverApplied", []porcupine.Operation{
			op(0, 0, -1, claimIn(0, t1), output{}),
			op(1, 5, 6, input{kind: opGet, now: 10}, output{notFound: true}),
			op(1, 7, 8, claimIn(11, t2), acquired(inProgress(t2, 1, 11, 11))),
		}, true},
		{"UnknownCompleteAppliedLate", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, -1, completeIn(10, t1), output{}),
			op(1, 3, 4, claimIn(20, t2), inProg(fresh)),
			op(1, 5, 6, claimIn(21, t2), output{outcome: idem.ClaimDuplicate, rec: completed(fresh, 10)}),
		}, true},
		{"SupersedeThenClaim", supersedeThenClaim(output{}, "fp-b"), true},
		{"SupersedeIgnored", supersedeThenClaim(output{}, "fp-a"), false},
		{"SupersedeRefusedKeepsContent", supersedeThenClaim(output{leaseLost: true}, "fp-a"), false},
		{"SupersedeOwner", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(1, 2, 3, input{kind: opSupersede, now: 5, token: t1, fp: "fp-b"}, output{}),
		}, false},
		{"SupersedeExpired", []porcupine.Operation{
			op(0, 0, 1, claimIn(0, t1), acquired(fresh)),
			op(0, 2, 3, completeIn(10, t1), output{}),
			op(1, 4, 5, input{kind: opSupersede, now: 110, token: t1, fp: "fp-b"}, output{notFound: true}),
		}, true},
		{"ReleaseKeepsFingerprint", releaseThenClaim("fp-a"), true},
		{"ReleaseForgetsFingerprint", releaseThenClaim("fp-b"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := check(t, tc.ops)
			var v *Violation
			switch {
			case tc.legal && err != nil:
				t.Fatalf("legal history rejected: %v", err)
			case !tc.legal && !errors.As(err, &v):
				t.Fatalf("illegal history: Check = %v, want a *Violation", err)
			case !tc.legal && !strings.Contains(v.Report, "none of these can come next"):
				t.Fatalf("report without the calls that cannot come next:\n%s", v.Report)
			case !tc.legal:
				t.Log(v.Error())
				for _, f := range []string{v.HistoryFile, v.Visualization} {
					if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
						t.Errorf("report file %q: %v", f, err)
					}
				}
			}
		})
	}
}
