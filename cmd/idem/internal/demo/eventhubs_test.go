package demo

import "testing"

// TestRunEventHubs runs the demo on the in-process Event Hubs, in both
// modes, under heavy chaos: what every stream must show (runStream), the
// default store in tx mode, and acks lost (each a crash before the
// checkpoint) on the record.
func TestRunEventHubs(t *testing.T) {
	runStream(t, EventHubs, func(t *testing.T, store string, rep *Report) {
		if want := map[string]string{"": "tx", "memory://": "two-phase"}[store]; rep.Mode != want {
			t.Errorf("mode %q, want %q", rep.Mode, want)
		}
		if rep.AcksLost == 0 {
			t.Fatalf("no ack lost: %+v", rep)
		}
	})
}
