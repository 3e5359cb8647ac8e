package integration_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/store/memory"
)

func TestMetricsAndSpans(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	obs, err := idemotel.New(idemotel.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(memory.New(), idem.Options{Scope: "billing", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	g.Do(ctx, idem.Message{ID: "a", Payload: []byte("1")}, h)
	g.Do(ctx, idem.Message{ID: "a", Payload: []byte("1")}, h)
	g.Do(ctx, idem.Message{ID: "a", Payload: []byte("1")}, h)
	g.Do(ctx, idem.Message{ID: "a", Payload: []byte("2")}, h)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	histograms := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out, _ := dp.Attributes.Value("idem.outcome")
					scope, _ := dp.Attributes.Value("idem.scope")
					if scope.AsString() != "billing" {
						t.Errorf("scope attribute %q", scope.AsString())
					}
					counts[out.AsString()] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					histograms[m.Name] += dp.Count
				}
			}
		}
	}
	if counts["processed"] != 1 || counts["duplicate"] != 2 || counts["conflict"] != 1 {
		t.Fatalf("idem.messages by outcome = %v", counts)
	}
	if histograms["idem.duration"] != 4 || histograms["idem.handler.duration"] != 1 || histograms["idem.claim.duration"] != 4 {
		t.Fatalf("histogram counts = %v", histograms)
	}
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	last := spans[3]
	if last.Name() != "idem conflict" || last.Status().Code != codes.Error {
		t.Fatalf("conflict span %q status %v", last.Name(), last.Status())
	}
	if spans[1].Status().Code == codes.Error {
		t.Fatal("duplicate span marked as error")
	}
	found := false
	for _, a := range last.Attributes() {
		if a.Key == "idem.key" && a.Value.AsString() == "a" {
			found = true
		}
	}
	if !found {
		t.Fatalf("span lacks idem.key: %v", last.Attributes())
	}
}

// A transaction that its store ran twice (a deferred marker that met a
// recorded key) says so on its span; one that ran once does not.
func TestSpanTxRuns(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	obs, err := idemotel.New(idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, runs := range []int{1, 2} {
		obs.Observe(ctx, idem.Event{Key: idem.Key{Scope: "s", ID: "k"}, Mode: "tx", Outcome: idem.OutcomeDuplicate, TxRuns: runs})
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []int64{0, 2} {
		var got int64
		for _, a := range spans[i].Attributes() {
			if a.Key == "idem.tx_runs" {
				got = a.Value.AsInt64()
			}
		}
		if got != want {
			t.Errorf("span %d: idem.tx_runs = %d, want %d (0: absent)", i, got, want)
		}
	}
}

// The handler's own spans nest under idem's span, and the span carries the
// producer's correlation id (its W3C trace id here).
func TestHandlerSpansNestAndCorrelation(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	obs, err := idemotel.New(idemotel.Options{MeterProvider: sdkmetric.NewMeterProvider(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(memory.New(), idem.Options{Scope: "billing", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	msg := idem.Message{ID: "a", Payload: []byte("1"), Headers: map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}}
	_, err = g.Do(context.Background(), msg, func(ctx context.Context) ([]byte, error) {
		_, span := tp.Tracer("handler").Start(ctx, "charge")
		span.End()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the handler's and idem's", len(spans))
	}
	handler, outer := spans[0], spans[1]
	if outer.Name() != "idem processed" || handler.Parent().SpanID() != outer.SpanContext().SpanID() {
		t.Fatalf("handler span %q (parent %v) does not nest under %q (%v)", handler.Name(), handler.Parent().SpanID(), outer.Name(), outer.SpanContext().SpanID())
	}
	found := false
	for _, a := range outer.Attributes() {
		if a.Key == "idem.correlation_id" && a.Value.AsString() == traceID {
			found = true
		}
	}
	if !found {
		t.Fatalf("idem span lacks idem.correlation_id %s: %v", traceID, outer.Attributes())
	}
}
