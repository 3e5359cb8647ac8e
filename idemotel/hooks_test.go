package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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

// The hooks count what the engine reports, from the guard's real results
// (broker.Decide builds the reports as the engine does), and the user's
// hooks still run, each once per call.
func TestHooks(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var before, after, dead, errs []string
	user := broker.Hooks[msg]{
		BeforeSettle: func(_ context.Context, m msg, _ broker.Report) { before = append(before, m.id) },
		AfterSettle:  func(_ context.Context, m msg, _ broker.Report) { after = append(after, m.id) },
		OnDeadLetter: func(_ context.Context, m msg, r broker.Report) { dead = append(dead, m.id+":"+r.Reason) },
		OnError:      func(err error) { errs = append(errs, err.Error()) },
	}
	hooks, err := idemotel.Hooks(idemotel.Options{MeterProvider: mp}, user)
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(memory.New(), idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	settle := func(id string, r broker.Report) {
		hooks.CallBeforeSettle(ctx, msg{id}, r)
		if r.Action == idem.ActionDeadLetter && r.BrokerErr == nil {
			hooks.CallOnDeadLetter(ctx, msg{id}, r)
		}
		hooks.CallAfterSettle(ctx, msg{id}, r)
	}
	do := func(id, payload string) broker.Report {
		res, err := g.Do(ctx, idem.Message{ID: id, Payload: []byte(payload)}, ok)
		return broker.Decide(res, err, time.Now(), 1, nil)
	}

	settle("a", do("a", "1")) // processed: ack
	settle("b", do("a", "1")) // duplicate: ack
	conflict := do("a", "2")
	if conflict.Action != idem.ActionDeadLetter || conflict.Reason != "conflict" {
		t.Fatalf("conflict report %+v", conflict)
	}
	settle("c", conflict)
	// A delivery held MaxHold and handed back, its key in progress elsewhere.
	settle("d", broker.Report{Result: idem.Result{Outcome: idem.OutcomeInProgress, Key: idem.Key{Scope: "billing", ID: "x"}},
		Err: idem.ErrInProgress, Action: idem.ActionRetry, Attempt: 2})
	// The last allowed delivery of a failing handler.
	settle("e", broker.Report{Result: idem.Result{Outcome: idem.OutcomeFailed, Key: idem.Key{Scope: "billing", ID: "y"}},
		Err: errors.New("boom"), Action: idem.ActionDeadLetter, Reason: broker.ReasonMaxDeliver, Attempt: 5})
	// A dead letter the broker refused: not durable, so no OnDeadLetter.
	settle("f", broker.Report{Result: idem.Result{Outcome: idem.OutcomeNoKey}, Err: idem.ErrNoKey,
		Action: idem.ActionDeadLetter, Reason: "no_key", BrokerErr: errors.New("dlq full")})
	// An ack that failed.
	settle("g", broker.Report{Result: idem.Result{Outcome: idem.OutcomeProcessed, Key: idem.Key{Scope: "billing", ID: "z"}},
		Action: idem.ActionAck, BrokerErr: errors.New("connection reset")})

	down := errors.New("dial tcp: connection refused")
	hooks.CallOnError(&broker.OutageError{Err: down, Held: 3})
	hooks.CallOnError(fmt.Errorf("wrapped: %w", &broker.OutageError{Err: down, Held: 4}))
	hooks.CallOnError(errors.New("broker: fetch: timeout"))

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
		"idem.broker.store_outages{}": 2,
		"idem.broker.outage_held{}":   7,
		"idem.broker.errors{}":        1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("counters:\n%s\nwant:\n%s", dump(got), dump(want))
	}
	if strings.Join(before, "") != "abcdefg" || strings.Join(after, "") != "abcdefg" {
		t.Errorf("the user's BeforeSettle saw %v, AfterSettle %v", before, after)
	}
	if strings.Join(dead, " ") != "c:conflict e:max_deliver" {
		t.Errorf("the user's OnDeadLetter saw %v", dead)
	}
	if len(errs) != 3 || !strings.Contains(errs[0], "store unreachable") {
		t.Errorf("the user's OnError saw %q", errs)
	}
}

// Without hooks of the user's, the metrics' hooks run alone.
func TestHooksAlone(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	hooks, err := idemotel.Hooks(idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}, broker.Hooks[msg]{})
	if err != nil {
		t.Fatal(err)
	}
	if hooks.BeforeSettle != nil {
		t.Error("a BeforeSettle of the metrics' own: every delivery would pay for a call that does nothing")
	}
	ctx := context.Background()
	r := broker.Report{Result: idem.Result{Outcome: idem.OutcomePermanent, Key: idem.Key{Scope: "s", ID: "k"}},
		Action: idem.ActionDeadLetter, Reason: "invalid_data"}
	hooks.CallBeforeSettle(ctx, msg{"a"}, r)
	hooks.CallOnDeadLetter(ctx, msg{"a"}, r)
	hooks.CallAfterSettle(ctx, msg{"a"}, r)
	hooks.CallOnError(errors.New("commit failed"))
	got := sums(t, reader)
	if got["idem.broker.dead_letters{idem.reason=invalid_data,idem.scope=s}"] != 1 || got["idem.broker.errors{}"] != 1 {
		t.Errorf("counters:\n%s", dump(got))
	}
}

func dump(m map[string]int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "  %s %d\n", k, m[k])
	}
	return b.String()
}
