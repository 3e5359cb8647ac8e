package integration_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/storekit"
)

// claimLog is a store that notes every claim the consumer's guard makes:
// when (the request's Now) and what it found.
type claimLog struct {
	idem.Store
	mu     sync.Mutex
	claims map[string][]loggedClaim
	// onNote, when set, sees each claim as it is noted.
	onNote func(id string, c idem.Claim)
}

type loggedClaim struct {
	now   time.Time
	claim idem.Claim
}

// batchClaimLog is a claimLog over an storekit.BatchStore that is one too, so
// that Run claims records in batches.
type batchClaimLog struct {
	*claimLog
	bs storekit.BatchStore
}

// newClaimLog wraps st; with batch, the result is an storekit.BatchStore.
func newClaimLog(st *memory.Store, batch bool) (*claimLog, idem.Store) {
	l := &claimLog{Store: st, claims: make(map[string][]loggedClaim)}
	if batch {
		return l, &batchClaimLog{claimLog: l, bs: st}
	}
	return l, l
}

func (s *claimLog) note(req idem.ClaimRequest, c idem.Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims[req.Key.ID] = append(s.claims[req.Key.ID], loggedClaim{now: req.Now, claim: c})
	if s.onNote != nil {
		s.onNote(req.Key.ID, c)
	}
}

// heldClock is the guard's clock in the orphan case: frozen at its start
// until release, then running on from the start. So the first claim of the
// orphaned key finds its lease live however slowly the consumer starts on
// a loaded machine, and a claim after it finds the lease ended only if the
// consumer really waited for it.
type heldClock struct {
	mu       sync.Mutex
	start    time.Time
	released time.Time // zero while frozen
}

func (c *heldClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released.IsZero() {
		return c.start
	}
	return c.start.Add(time.Since(c.released))
}

func (c *heldClock) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released.IsZero() {
		c.released = time.Now()
	}
}

func (s *claimLog) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c, err := s.Store.Claim(ctx, req)
	if err == nil {
		s.note(req, c)
	}
	return c, err
}

func (s *batchClaimLog) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	cs, err := s.bs.ClaimBatch(ctx, reqs)
	if err == nil {
		for i, c := range cs {
			s.note(reqs[i], c)
		}
	}
	return cs, err
}

// claimModes runs f with per-record claims and with batch claims.
func claimModes(t *testing.T, f func(t *testing.T, batch bool)) {
	t.Run("per-record", func(t *testing.T) { f(t, false) })
	t.Run("batch", func(t *testing.T) { f(t, true) })
}

func (s *claimLog) of(id string) []loggedClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.claims[id])
}

func (s *claimLog) inProgress(id string) int {
	n := 0
	for _, c := range s.of(id) {
		if c.claim.Outcome == idem.ClaimInProgress {
			n++
		}
	}
	return n
}

// checkHeldOnBackoff: a record held in progress elsewhere is claimed again
// on the back-off, not at the holder's lease end (a holder that gives the
// key back is seen early), but never retaken before that lease ended: an
// acquired claim after in-progress answers comes at or after the lease end
// the previous answer found.
func checkHeldOnBackoff(t *testing.T, claims []loggedClaim) {
	t.Helper()
	for i := 1; i < len(claims); i++ {
		prev := claims[i-1]
		if prev.claim.Outcome != idem.ClaimInProgress || claims[i].claim.Outcome != idem.ClaimAcquired {
			continue
		}
		if until := prev.claim.Record.LeaseUntil; claims[i].now.Before(until) {
			t.Errorf("claim %d retook the key %v before the lease end that claim %d found", i, until.Sub(claims[i].now), i-1)
		}
	}
}

// heldWorkload produces a, b, c (payloads seq 0, 1, 2) to partition 0,
// sets the commit check that no commit passes a record whose key is not
// completed in st, and returns the records with their offsets.
func heldWorkload(t *testing.T, e *env, st *memory.Store) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	ids := map[int32]map[int64]string{0: {}}
	for i, id := range []string{"a", "b", "c"} {
		recs = append(recs, kafka.Record(e.topic, "", id, payload(0, i)))
	}
	e.produce(recs...)
	for _, r := range recs {
		ids[0][r.Offset] = idOf(r)
	}
	e.commit.setCheck(doneBefore(st, e.group, ids))
	return recs
}

// TestInProgressWaitsForLease: a record whose key a live owner elsewhere
// holds (a producer retry arriving during a long handler) holds its
// partition, and is claimed again on the back-off (1ms here, against a 1s
// lease; the engine's hold): the holder renews meanwhile, so every claim
// finds it in progress again, and once the holder completes the record is a
// duplicate. Nothing is dead-lettered, nothing
// after it runs or is committed before it.
func TestInProgressWaitsForLease(t *testing.T) { claimModes(t, testInProgressWaitsForLease) }

func testInProgressWaitsForLease(t *testing.T, batch bool) {
	// Long enough that a holder whose heartbeat runs late on a loaded machine
	// (it renews every lease/3) keeps its key: the case needs a live holder.
	const lease = time.Second
	e := newEnv(t, "leasehold", 1)
	mem := memory.New()

	// The holder: another consumer's guard, handling b with its heartbeat
	// renewing the lease every lease/3 until the test lets it finish.
	holder, err := idem.New(mem, idem.Options{Scope: e.group, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	entered, finish := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		_, err := holder.Do(context.Background(), idem.Message{ID: "b", Payload: payload(0, 1)}, func(context.Context) ([]byte, error) {
			close(entered)
			<-finish
			return []byte("holder"), nil
		})
		holderDone <- err
	}()
	waitClosed(t, "the holder's handler", entered)

	heldWorkload(t, e, mem)
	log, st := newClaimLog(mem, batch)
	counter := &idem.Counter{}
	g, err := idem.New(st, idem.Options{Scope: e.group, Lease: lease, Observer: counter})
	if err != nil {
		t.Fatal(err)
	}
	eff := newEffects(nil)
	startConsumer(t, e, g, kafka.Options{Backoff: idem.ExponentialBackoff(time.Millisecond, time.Millisecond), MaxDeliveries: 1, CommitInterval: 20 * time.Millisecond}, orderHandler(t, eff))

	eventually(t, "three in-progress answers for b", func() bool { return log.inProgress("b") >= 3 })
	if got := e.committed()[0]; got > 1 {
		t.Fatalf("committed %d while b (offset 1) is in progress elsewhere", got)
	}
	close(finish)
	if err := <-holderDone; err != nil {
		t.Fatalf("holder: %v", err)
	}
	e.waitCommitted(t)

	claims := log.of("b")
	checkHeldOnBackoff(t, claims)
	if last := claims[len(claims)-1].claim; last.Outcome != idem.ClaimDuplicate || string(last.Record.Result) != "holder" {
		t.Errorf("b's last claim %v, want the holder's completed record", last)
	}
	eff.check(t, []string{"a", "c"}) // b's effect is the holder's
	if n := counter.Count(idem.OutcomeConflict) + counter.Count(idem.OutcomeStale) + counter.Count(idem.OutcomeFailed); n != 0 {
		t.Errorf("outcomes %v", counter.Counts())
	}
	if end := e.dlqEnd(); end != 0 {
		t.Errorf("%d dead letters, want none (MaxAttempts does not count keys in progress elsewhere)", end)
	}
}

// TestOrphanedClaimRetaken: a key whose claim was orphaned (its owner
// crashed with the lease running, as when a claim's reply was lost) holds
// the partition until the lease ends (claimed on the back-off meanwhile,
// finding it in progress), then is retaken as stale and processed: one
// retake, one effect.
func TestOrphanedClaimRetaken(t *testing.T) { claimModes(t, testOrphanedClaimRetaken) }

func testOrphanedClaimRetaken(t *testing.T, batch bool) {
	const lease = 300 * time.Millisecond
	e := newEnv(t, "orphan", 1)
	mem := memory.New()
	recs := heldWorkload(t, e, mem)

	fp, err := idem.PayloadFingerprint(kafka.MessageOf(recs[1]))
	if err != nil {
		t.Fatal(err)
	}
	clock := &heldClock{start: time.Now()}
	now := clock.Now()
	orphan, err := mem.Claim(context.Background(), idem.ClaimRequest{
		Key: idem.Key{Scope: e.group, ID: "b"}, Fingerprint: fp, Now: now,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(time.Hour),
	})
	if err != nil || orphan.Outcome != idem.ClaimAcquired {
		t.Fatal(orphan, err)
	}

	log, st := newClaimLog(mem, batch)
	log.onNote = func(id string, c idem.Claim) {
		if id == "b" && c.Outcome == idem.ClaimInProgress {
			clock.release()
		}
	}
	g, err := idem.New(st, idem.Options{Scope: e.group, Lease: lease, Clock: clock.Now, Stale: idem.StaleRetake})
	if err != nil {
		t.Fatal(err)
	}
	eff := newEffects(nil)
	startConsumer(t, e, g, kafka.Options{Backoff: idem.ExponentialBackoff(time.Millisecond, time.Millisecond), CommitInterval: 20 * time.Millisecond}, orderHandler(t, eff))
	e.waitCommitted(t)

	claims := log.of("b")
	checkHeldOnBackoff(t, claims)
	last := len(claims) - 1
	if last < 1 || claims[0].claim.Outcome != idem.ClaimInProgress ||
		claims[last].claim.Outcome != idem.ClaimAcquired || !claims[last].claim.Retaken {
		t.Errorf("b claimed %d times (%v), want in progress (held on the back-off), then retaken", len(claims), outcomes(claims))
	}
	for _, c := range claims[:last] {
		if c.claim.Outcome != idem.ClaimInProgress {
			t.Errorf("b's claims %v, want in progress until the retake", outcomes(claims))
			break
		}
	}
	eff.check(t, []string{"a", "b", "c"})
	rec, err := mem.Get(context.Background(), idem.Key{Scope: e.group, ID: "b"})
	if err != nil || rec.State != idem.StateCompleted || rec.Attempts != 2 || rec.Token == orphan.Record.Token {
		t.Errorf("record %+v %v, want completed by a second claim under a new token", rec, err)
	}
}

func outcomes(claims []loggedClaim) []idem.ClaimOutcome {
	out := make([]idem.ClaimOutcome, len(claims))
	for i, c := range claims {
		out[i] = c.claim.Outcome
	}
	return out
}
