package outboxotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgo/idem/outbox"
	outboxmemory "github.com/idemgo/idem/outbox/memory"
	"github.com/idemgo/idem/outbox/outboxotel"
)

// collect returns each metric's sum (counters, gauges) or count
// (histograms), over its data points.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					name := m.Name
					if v, ok := p.Attributes.Value("outbox.result"); ok {
						name += "/" + v.AsString()
					}
					if v, ok := p.Attributes.Value("outbox.lease"); ok {
						name += "/" + v.AsString()
					}
					out[name] += float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] += float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] += float64(p.Count)
				}
			}
		}
	}
	return out
}

func TestGauges(t *testing.T) {
	s, err := outboxmemory.New(outboxmemory.Options{Clock: func() time.Time { return time.Now().Add(-time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.InTx(ctx, func(ctx context.Context, tx *outboxmemory.Tx) error {
		return s.Enqueue(ctx, tx, outbox.Message{ID: "a", Destination: "d"}, outbox.Message{ID: "b", Destination: "d"})
	}); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	gauges, err := outboxotel.NewGauges(outboxotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Name: "billing", Stats: s})
	if err != nil {
		t.Fatal(err)
	}
	defer gauges.Close()
	got := collect(t, reader)
	want := map[string]float64{"outbox.pending": 2, "outbox.parked": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got["outbox.lag"] < 59 {
		t.Errorf("outbox.lag = %v s, want the oldest pending record's minute", got["outbox.lag"])
	}
	if _, err := outboxotel.NewGauges(outboxotel.Options{}); err == nil {
		t.Error("NewGauges without Stats: no error")
	}
}
