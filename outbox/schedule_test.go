package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
)

// TestUnscheduled: a publisher that cannot schedule sends the records
// without NotBefore, in order, and refuses the others with a
// *ScheduleError that the relay parks (ErrRejected).
func TestUnscheduled(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	recs := []outbox.Record{
		{Message: outbox.Message{ID: "a"}}, {Message: outbox.Message{ID: "b", NotBefore: at}},
		{Message: outbox.Message{ID: "c"}}, {Message: outbox.Message{ID: "d", NotBefore: at}},
	}
	var sent []string
	sendErr := errors.New("broker down")
	errs := outbox.Unscheduled("outboxtestpub", recs, func(rs []outbox.Record) []error {
		out := make([]error, len(rs))
		for i, r := range rs {
			sent = append(sent, r.ID)
			if r.ID == "c" {
				out[i] = sendErr
			}
		}
		return out
	})
	if len(sent) != 2 || sent[0] != "a" || sent[1] != "c" {
		t.Fatalf("sent %v, want a and c", sent)
	}
	if errs[0] != nil || !errors.Is(errs[2], sendErr) {
		t.Errorf("errors of the sent records %v, %v: want the publish's own", errs[0], errs[2])
	}
	for _, i := range []int{1, 3} {
		var se *outbox.ScheduleError
		if !errors.As(errs[i], &se) || se.ID != recs[i].ID || !se.NotBefore.Equal(at) || se.Publisher != "outboxtestpub" {
			t.Errorf("record %s: %v, want a *ScheduleError naming it", recs[i].ID, errs[i])
		}
		if !errors.Is(errs[i], outbox.ErrCannotSchedule) || !outbox.IsRejected(errs[i]) {
			t.Errorf("record %s: %v does not match ErrCannotSchedule and ErrRejected", recs[i].ID, errs[i])
		}
	}
	// None scheduled: recs are passed through as they are.
	calls := 0
	outbox.Unscheduled("p", recs[:1], func(rs []outbox.Record) []error { calls++; return make([]error, len(rs)) })
	if calls != 1 {
		t.Errorf("publish called %d times for an unscheduled batch, want 1", calls)
	}
}
