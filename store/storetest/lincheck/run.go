package lincheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// Run records a history of concurrent calls on the store open returns (a
// fresh, empty one, cleaned up through t) and checks it against the model
// of the idem.Store contract. A history the model cannot explain fails t
// with the offending key's history; so does a search that times out, or a
// history in which more than opts.MaxUnknown of the calls failed.
func Run(t *testing.T, open func(t *testing.T) idem.Store, opts Options) {
	t.Helper()
	s := open(t)
	h, err := Record(context.Background(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(h.Summary())
	if u := float64(h.unknown) / float64(max(1, h.calls)); u > h.opts.MaxUnknown {
		t.Errorf("lincheck: %.0f%% of the calls failed (more than %.0f%%): the history proves little; %s",
			100*u, 100*h.opts.MaxUnknown, h.Summary())
	}
	start := time.Now()
	err = h.Check()
	var v *Violation
	switch {
	case errors.As(err, &v):
		t.Fatal(v.Error())
	case err != nil:
		t.Fatal(err)
	}
	t.Logf("linearizable (checked in %v)", time.Since(start).Round(time.Millisecond))
}
