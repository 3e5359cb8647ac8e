package consumetest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// ReportTo returns hooks that send every Report to ch, after the broker
// action.
func ReportTo[M any](ch chan<- broker.Report) broker.Hooks[M] {
	return broker.Hooks[M]{AfterSettle: func(_ context.Context, _ M, r broker.Report) { ch <- r }}
}

// CountAcks returns hooks that fail t on any report but an ack and call
// done once n messages are settled.
func CountAcks[M any](t testing.TB, n int, done func()) broker.Hooks[M] {
	var settled atomic.Int64
	return broker.Hooks[M]{AfterSettle: func(_ context.Context, _ M, r broker.Report) {
		if r.Action != idem.ActionAck {
			t.Errorf("report %+v", r)
		}
		if settled.Add(1) == int64(n) {
			done()
		}
	}}
}
