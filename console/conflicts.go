package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemgo/idem"
)

// reasonConflict is the Idem-Reason of a dead-lettered conflict: a key that
// came back with other content than the content it is recorded with.
var reasonConflict = idem.DeadLetterReason(idem.ErrConflict)

// conflictsData is the Conflicts page: the conflicts the dead-letter queues
// hold, and what this process's Recorder saw (conflicts, parked keys, dead
// letters).
type conflictsData struct {
	Queues      []queueConflicts // one per dead-letter queue; none without Options.DeadLetters
	Recorder    bool
	Conflicts   []Conflict
	Parked      []Parked
	DeadLetters []DeadLetter
}

// queueConflicts are the conflicts among one queue's dead letters.
type queueConflicts struct {
	Queue int
	Name  string
	Err   string // listing the queue failed
	Cut   bool   // the queue holds more dead letters than were read
	Limit int
	Rows  []conflictRow
}

// conflictRow is one dead-lettered conflict: the dead letter's fingerprint
// and the stored ones its headers carry, beside the record of its key now.
type conflictRow struct {
	Letter            BrokerDeadLetter
	StoredFingerprint string       // Idem-Stored-Fingerprint: the content the key is recorded with
	StoredState       idem.State   // Idem-Stored-State: the record's state when the message was dead-lettered
	Record            *idem.Record // the key's record now; nil: none found
	RecordErr         string
}

func (c *Console) conflicts(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	d := &conflictsData{}
	records := map[string]recordLookup{} // by Idem-Key: a key dead-lettered again is read once
	for n, q := range c.opts.DeadLetters {
		d.Queues = append(d.Queues, c.queueConflicts(ctx, n, q, records))
	}
	if rec := c.opts.Recorder; rec != nil {
		d.Recorder = true
		d.Conflicts, d.Parked, d.DeadLetters = rec.Conflicts(), rec.ParkedKeys(), rec.DeadLetters()
	}
	c.render(w, r, http.StatusOK, "conflicts.html", &page{Title: "Conflicts and dead letters", Nav: "conflicts", Data: d})
}

// recordLookup is the record a dead letter's key found, or why none.
type recordLookup struct {
	rec *idem.Record // nil: none found
	err string       // reading it failed
}

// queueConflicts reads the oldest DeadLetterLimit dead letters of q and
// keeps the conflicts, each with its key's record now.
func (c *Console) queueConflicts(ctx context.Context, n int, q DeadLetters, records map[string]recordLookup) queueConflicts {
	qc := queueConflicts{Queue: n, Name: q.Name(), Limit: c.opts.DeadLetterLimit}
	dls, cut, err := c.listDeadLetters(ctx, q)
	if err != nil {
		qc.Err = fmt.Sprintf("reading %s failed: %v", qc.Name, err)
		return qc
	}
	qc.Cut = cut
	for _, dl := range dls {
		if dl.Reason != reasonConflict {
			continue
		}
		l, ok := records[dl.Key]
		if !ok {
			l = c.recordOf(ctx, dl)
			records[dl.Key] = l
		}
		h := idem.Message{Headers: dl.Headers} // its Header matches a name in any case, as brokers spell them
		qc.Rows = append(qc.Rows, conflictRow{Letter: dl, StoredFingerprint: h.Header(idem.HeaderStoredFingerprint),
			StoredState: idem.State(h.Header(idem.HeaderStoredState)), Record: l.rec, RecordErr: l.err})
	}
	return qc
}

// recordOf finds the record of the dead letter's key, trying each split of
// its Idem-Key (a scope may hold a slash).
func (c *Console) recordOf(ctx context.Context, dl BrokerDeadLetter) recordLookup {
	for _, k := range dl.Keys() {
		if k.Validate() != nil {
			continue
		}
		rec, err := c.st.Get(ctx, k)
		if errors.Is(err, idem.ErrNotFound) {
			continue
		}
		if err != nil {
			return recordLookup{err: fmt.Sprintf("reading the record of %s failed: %v", k, err)}
		}
		return recordLookup{rec: &rec}
	}
	return recordLookup{}
}
