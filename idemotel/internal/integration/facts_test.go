package integration_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/store/memory"
)

type msg struct{ id string }

// sums collects every int64 counter as "name{k=v,...}" -> value.
func sums(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range d.DataPoints {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.Emit())
				}
				out[m.Name+"{"+strings.Join(kv, ",")+"}"] += dp.Value
			}
		}
	}
	return out
}

// The observer counts what the engine reports, from the guard's real
// results (broker.Decide builds the reports as the engine does), the
// outages by scope, the errors handled, the relay's events and the sweeps.
func TestFacts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), NoSpans: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(memory.New(), idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	settle := func(r broker.Report) {
		r.DeadLettered = r.Action == idem.ActionDeadLetter && r.BrokerErr == nil
		obs.ObserveSettlement(ctx, r)
	}
	do := func(id, payload string) broker.Report {
		res, err := g.Do(ctx, idem.Message{ID: id, Payload: []byte(payload)}, ok)
		return broker.Decide(res, err, time.Now(), 1, nil)
	}

	settle(do("a", "1")) // processed: ack
	settle(do("a", "1")) // duplicate: ack
	conflict := do("a", "2")
	if conflict.Action != idem.ActionDeadLetter || conflict.Reason != "conflict" {
		t.Fatalf("conflict report %+v", conflict)
	}
	settle(conflict)
	// A delivery held MaxHold and handed back, its key in progress elsewhere.
	settle(broker.Report{Result: idem.Result{Outcome: idem.OutcomeInProgress, Key: idem.Key{Scope: "billing", ID: "x"}},
		Err: idem.ErrInProgress, Action: idem.ActionRetry, Attempt: 2})
	// The last allowed delivery of a failing handler.
	settle(broker.Report{Result: idem.Result{Outcome: idem.OutcomeFailed, Key: idem.Key{Scope: "billing", ID: "y"}},
		Err: errors.New("boom"), Action: idem.ActionDeadLetter, Reason: broker.ReasonMaxDeliver, Attempt: 5})
	// A dead letter the broker refused: not durable, not counted as one.
	settle(broker.Report{Result: idem.Result{Outcome: idem.OutcomeNoKey}, Err: idem.ErrNoKey,
		Action: idem.ActionDeadLetter, Reason: "no_key", BrokerErr: errors.New("dlq full")})
	// An ack that failed.
	settle(broker.Report{Result: idem.Result{Outcome: idem.OutcomeProcessed, Key: idem.Key{Scope: "billing", ID: "z"}},
		Action: idem.ActionAck, BrokerErr: errors.New("connection reset")})

	down := errors.New("dial tcp: connection refused")
	obs.ObserveOutage(ctx, idem.Outage{Err: down, Held: 3, Scope: "billing"})
	obs.ObserveOutage(ctx, idem.Outage{Err: down, Held: 4})
	obs.ObserveError(ctx, idem.HandledError{Component: "broker", Scope: "billing", Err: errors.New("broker: fetch: timeout")})
	obs.ObserveError(ctx, idem.HandledError{Component: "outbox", Err: errors.New("outbox: fetch: timeout")})

	obs.ObserveRelay(ctx, idem.RelayEvent{Kind: idem.RelayLeaseAcquired})
	obs.ObserveRelay(ctx, idem.RelayEvent{Kind: idem.RelayBatch, Published: 5, Failed: 1, Lag: time.Second})
	obs.ObserveRelay(ctx, idem.RelayEvent{Kind: idem.RelayCleanup, Deleted: 7})
	obs.ObserveSweep(ctx, idem.Sweep{Deleted: 9})
	obs.ObserveSweep(ctx, idem.Sweep{Deleted: 1, Err: errors.New("sweep: timeout")})

	got := sums(t, reader)
	want := map[string]int64{
		"idem.broker.settles{idem.action=ack,idem.outcome=processed,idem.scope=billing}":        2,
		"idem.broker.settles{idem.action=ack,idem.outcome=duplicate,idem.scope=billing}":        1,
		"idem.broker.settles{idem.action=dead_letter,idem.outcome=conflict,idem.scope=billing}": 1,
		"idem.broker.settles{idem.action=retry,idem.outcome=in_progress,idem.scope=billing}":    1,
		"idem.broker.settles{idem.action=dead_letter,idem.outcome=failed,idem.scope=billing}":   1,
		"idem.broker.settles{idem.action=dead_letter,idem.outcome=no_key}":                      1,
		"idem.broker.dead_letters{idem.reason=conflict,idem.scope=billing}":                     1,
		"idem.broker.dead_letters{idem.reason=max_deliver,idem.scope=billing}":                  1,
		"idem.broker.action_errors{idem.action=dead_letter}":                                    1,
		"idem.broker.action_errors{idem.action=ack,idem.scope=billing}":                         1,
		"idem.broker.store_outages{idem.scope=billing}":                                         1, // the scope the report names
		"idem.broker.outage_held{idem.scope=billing}":                                           3,
		"idem.broker.store_outages{}":                                                           1,
		"idem.broker.outage_held{}":                                                             4,
		"idem.broker.errors{idem.scope=billing}":                                                1,
		"outbox.errors{}":                                                                       1,
		"outbox.lease.changes{outbox.lease=acquired}":                                           1,
		"outbox.messages{outbox.result=published}":                                              5,
		"outbox.messages{outbox.result=failed}":                                                 1,
		"outbox.cleanup.deleted{}":                                                              7,
		"idem.sweep.deleted{}":                                                                  10,
		"idem.sweep.runs{idem.result=ok}":                                                       1,
		"idem.sweep.runs{idem.result=error}":                                                    1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("counters:\n%s\nwant:\n%s", dump(got), dump(want))
	}
}

func dump(m map[string]int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "  %s %d\n", k, m[k])
	}
	return b.String()
}

// fmsg is a delivery of the test's transport.
type fmsg struct{ id, payload string }

// transport settles in place and records what it did, by message id.
type transport struct{ done chan string }

func (transport) Receive(ctx context.Context, _ int) ([]fmsg, error) {
	<-ctx.Done()
	return nil, broker.ErrClosed
}
func (transport) Message(m fmsg) idem.Message {
	return idem.Message{ID: m.id, Payload: []byte(m.payload)}
}
func (transport) Delivery(fmsg) broker.Delivery { return broker.Delivery{Attempt: 1} }
func (t transport) Ack(_ context.Context, m fmsg) error {
	t.done <- "ack " + m.id
	return nil
}
func (t transport) Retry(_ context.Context, m fmsg, _ time.Duration) error {
	t.done <- "retry " + m.id
	return nil
}
func (t transport) DeadLetter(_ context.Context, m fmsg, dl broker.DeadLetter) error {
	t.done <- "dead_letter " + m.id + " " + dl.Reason
	return nil
}
func (transport) RetryDelays() bool { return true }

// downStore fails every claim while down, as an unreachable store does.
type downStore struct {
	idem.Store
	down atomic.Bool
}

func (s *downStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if s.down.Load() {
		return idem.Claim{}, errors.New("dial tcp 10.0.0.7:5432: connection refused")
	}
	return s.Store.Claim(ctx, req)
}

// The observer set on the guard alone, on a real consumer: what the engine
// reports for an ack, a conflict, a permanent failure, a delivery held past
// MaxHold and a store outage (with its scope) is what the counters say.
func TestObserverOnEngine(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), NoSpans: true})
	if err != nil {
		t.Fatal(err)
	}
	store := &downStore{Store: memory.New()}
	g, err := idem.New(store, idem.Options{Scope: "billing", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	holding := make(chan struct{})
	h := broker.Handle(func(ctx context.Context, m fmsg) ([]byte, error) {
		switch m.payload {
		case "bad":
			return nil, idem.Permanent(errors.New("unknown product"))
		case "slow":
			close(holding)
			<-release
		}
		return []byte("ok"), nil
	})
	tr := transport{done: make(chan string, 16)}
	c, err := broker.NewConsumer[fmsg](tr, g, h, broker.Options[fmsg]{
		Backoff: func(int) time.Duration { return 5 * time.Millisecond }, MaxHold: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := func(m fmsg, settled string) {
		t.Helper()
		c.Process(ctx, m)
		if got := <-tr.done; got != settled {
			t.Fatalf("%s: %q, want %q", m.id, got, settled)
		}
	}
	want(fmsg{"a", "1"}, "ack a")
	want(fmsg{"a", "2"}, "dead_letter a conflict")
	want(fmsg{"b", "bad"}, "dead_letter b permanent")
	// s is in progress at another delivery for longer than MaxHold.
	slow := make(chan broker.Report, 1)
	go func() { slow <- c.Process(ctx, fmsg{"s", "slow"}) }()
	<-holding
	want(fmsg{"s", "slow"}, "retry s")
	close(release)
	<-slow
	if got := <-tr.done; got != "ack s" {
		t.Fatalf("the holder: %q", got)
	}
	// The store down: the delivery is held until its context ends.
	store.down.Store(true)
	octx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	c.Process(octx, fmsg{"o", "1"})
	cancel()
	if got := <-tr.done; got != "retry o" {
		t.Fatalf("during the outage: %q", got)
	}

	got := sums(t, reader)
	for k, n := range map[string]int64{
		"idem.broker.settles{idem.action=ack,idem.outcome=processed,idem.scope=billing}":        2,
		"idem.broker.settles{idem.action=dead_letter,idem.outcome=conflict,idem.scope=billing}": 1,
		"idem.broker.settles{idem.action=retry,idem.outcome=in_progress,idem.scope=billing}":    1,
		"idem.broker.dead_letters{idem.reason=conflict,idem.scope=billing}":                     1,
		"idem.broker.dead_letters{idem.reason=permanent,idem.scope=billing}":                    1,
		"idem.broker.store_outages{idem.scope=billing}":                                         1,
		"idem.messages{idem.mode=two-phase,idem.outcome=conflict,idem.scope=billing}":           1,
	} {
		if got[k] != n {
			t.Errorf("%s = %d, want %d; all:\n%s", k, got[k], n, dump(got))
		}
	}
	if got["idem.broker.outage_held{idem.scope=billing}"] < 1 {
		t.Errorf("no held claims counted:\n%s", dump(got))
	}
}
