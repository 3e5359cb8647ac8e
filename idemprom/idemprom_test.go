package idemprom_test

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemprom"
	"github.com/idemgo/idem/idemprom/internal/idempromtest"
	"github.com/idemgo/idem/outbox"
	outboxmem "github.com/idemgo/idem/outbox/memory"
	"github.com/idemgo/idem/store/memory"
)

// value sums the samples of family name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

func TestEndpointCountsWhatHappened(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := memory.New()
	exp, err := idemprom.New(idemprom.Options{Store: st, Clock: func() time.Time { return now }, StatsEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	idempromtest.Traffic(t, st, exp, now)
	fams := idempromtest.Scrape(t, exp)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"idem_messages_total", map[string]string{"idem_scope": "billing", "idem_outcome": "processed"}, 3},
		{"idem_messages_total", map[string]string{"idem_scope": "billing", "idem_outcome": "duplicate"}, 2},
		{"idem_messages_total", map[string]string{"idem_scope": "billing", "idem_outcome": "conflict"}, 1},
		{"idem_messages_total", map[string]string{"idem_scope": "billing", "idem_outcome": "failed"}, 1},
		{"idem_claim_duration_seconds", map[string]string{"idem_scope": "billing"}, 7},
		{"idem_records", map[string]string{"idem_scope": "billing", "idem_state": "completed"}, 3},
		{"idem_records", map[string]string{"idem_scope": "billing", "idem_state": "in_progress"}, 1},
		{"idem_records", map[string]string{"idem_scope": "billing", "idem_state": "released"}, 1},
		{"idem_records_stale", map[string]string{"idem_scope": "billing"}, 1},
		{"idem_records_expired", map[string]string{"idem_scope": "mailer"}, 1},
		{"idem_records_oldest_in_progress_seconds", map[string]string{"idem_scope": "billing"}, 120},
	} {
		got, ok := value(fams, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// A sweep: counted, and its time noted.
	sw := idem.Sweeper{Store: st, Clock: func() time.Time { return now }, Observer: exp.Observer()}
	before := time.Now()
	n, err := sw.SweepOnce(context.Background())
	exp.Observer().ObserveSweep(context.Background(), idem.Sweep{Deleted: n, Err: err})
	fams = idempromtest.Scrape(t, exp)
	if got, _ := value(fams, "idem_sweep_deleted_total", nil); got != 1 {
		t.Errorf("idem_sweep_deleted_total = %v, want 1", got)
	}
	if got, _ := value(fams, "idem_sweep_runs_total", map[string]string{"idem_result": "ok"}); got != 1 {
		t.Errorf("idem_sweep_runs_total{ok} = %v, want 1", got)
	}
	if got, _ := value(fams, "idem_sweep_last_success_seconds", nil); got < float64(before.Unix()) || got > float64(time.Now().Unix()+1) {
		t.Errorf("idem_sweep_last_success_seconds = %v, want the sweep's time, %d", got, before.Unix())
	}
	if got, _ := value(fams, "idem_records_expired", map[string]string{"idem_scope": "mailer"}); got != 0 {
		t.Errorf("expired after the sweep = %v, want 0", got)
	}
}

func TestRecordsCountedAtMostOncePerInterval(t *testing.T) {
	st := &countingInspector{Inspector: memory.New()}
	exp, err := idemprom.New(idemprom.Options{Store: st, StatsEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	for range 4 {
		idempromtest.Scrape(t, exp)
	}
	if st.n != 1 {
		t.Fatalf("four scrapes counted the store %d times, want 1", st.n)
	}
}

type countingInspector struct {
	idem.Inspector
	n int
}

func (c *countingInspector) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	c.n++
	return c.Inspector.Stats(ctx, now)
}

func TestOutboxGauges(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ob, err := outboxmem.New(outboxmem.Options{Clock: func() time.Time { return now.Add(-10 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outboxmem.Tx) error {
		return ob.Enqueue(ctx, tx, outbox.Message{ID: "m1", Destination: "orders", Payload: []byte("x")},
			outbox.Message{ID: "m2", Destination: "orders", Payload: []byte("y")})
	}); err != nil {
		t.Fatal(err)
	}
	exp, err := idemprom.New(idemprom.Options{Outbox: ob, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	fams := idempromtest.Scrape(t, exp)
	if got, _ := value(fams, "idem_outbox_messages", map[string]string{"idem_state": "pending"}); got != 2 {
		t.Errorf("pending = %v, want 2", got)
	}
	if got, _ := value(fams, "idem_outbox_lag_seconds", nil); got != 600 {
		t.Errorf("lag = %v, want 600", got)
	}
}
