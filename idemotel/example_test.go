package idemotel_test

import (
	"log"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/store/memory"
)

// One observer, set once on the guard, is what every component reports
// to: the guard's calls, the consumer engine's settles, errors and store
// outages (every adapter on package broker, on the guard it is given), the
// Sweeper's sweeps, and the outbox relay's events
// (outbox.RelayOptions{Observer: obs}). The instruments are made on the
// global providers here (otel.GetMeterProvider, the default), which reach
// your exporter once you set them to your SDK's.
func ExampleNew() {
	obs, err := idemotel.New(idemotel.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store := memory.New()
	g, err := idem.New(store, idem.Options{Scope: "billing", Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	// Any adapter's consumer built on g reports to obs: no second option.
	_ = g
	sw := idem.Sweeper{Store: store, Observer: obs} // sw.Run(ctx) in a goroutine of its own
	_ = sw
}
