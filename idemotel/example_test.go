package idemotel_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/idemotel"
)

// The consumer's own hooks keep running; the metrics' hooks count first,
// on the meter provider given: here the global one (otel.GetMeterProvider,
// the default), which reaches your exporter once you set it to your
// SDK's MeterProvider (otel.SetMeterProvider), or pass that one instead.
// Here a dead letter is reported by hand, as the engine reports it.
func ExampleHooks() {
	mine := broker.Hooks[string]{
		OnDeadLetter: func(_ context.Context, msg string, r broker.Report) { fmt.Println("dead letter:", msg, r.Reason) },
	}
	hooks, err := idemotel.Hooks(idemotel.Options{MeterProvider: otel.GetMeterProvider()}, mine)
	if err != nil {
		log.Fatal(err)
	}
	// broker.Options[M]{Hooks: hooks} in a consumer's options; the engine then
	// calls, for a message dead-lettered at its last delivery (counted in
	// idem.broker.dead_letters with idem.reason max_deliver, then passed on):
	hooks.CallOnDeadLetter(context.Background(), "order-7", broker.Report{
		Result: idem.Result{Outcome: idem.OutcomeFailed, Key: idem.Key{Scope: "billing", ID: "order-7"}},
		Action: idem.ActionDeadLetter, Reason: broker.ReasonMaxDeliver,
	})
	// Output:
	// dead letter: order-7 max_deliver
}
