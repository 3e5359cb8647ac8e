package idemotel_test

import (
	"context"
	"fmt"
	"log"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/idemotel"
)

// The consumer's own hooks keep running; the metrics' hooks count first.
// Here a dead letter is reported by hand, as the engine reports it.
func ExampleHooks() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mine := broker.Hooks[string]{
		OnDeadLetter: func(_ context.Context, msg string, r broker.Report) { fmt.Println("dead letter:", msg, r.Reason) },
	}
	hooks, err := idemotel.Hooks(idemotel.Options{MeterProvider: mp}, mine)
	if err != nil {
		log.Fatal(err)
	}
	// broker.Options[M]{Hooks: hooks} in a consumer's options; the engine then calls:
	hooks.CallOnDeadLetter(context.Background(), "order-7", broker.Report{
		Result: idem.Result{Outcome: idem.OutcomeFailed, Key: idem.Key{Scope: "billing", ID: "order-7"}},
		Action: idem.ActionDeadLetter, Reason: broker.ReasonMaxDeliver,
	})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && len(sum.DataPoints) > 0 {
			reason, _ := sum.DataPoints[0].Attributes.Value("idem.reason")
			fmt.Println(m.Name, reason.Emit(), sum.DataPoints[0].Value)
		}
	}
	// Output:
	// dead letter: order-7 max_deliver
	// idem.broker.dead_letters max_deliver 1
}
