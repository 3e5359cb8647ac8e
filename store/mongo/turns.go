package mongoidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Turns: how the store writes a record on FerretDB v1 from any number of
// processes, with unique-index inserts as its only atomic step.
//
// FerretDB v1 runs a conditional update, replace or delete as a query and
// then a write by _id: two of them racing on one record can both match
// and both apply, in one process or two. Its inserts are atomic (the
// unique _id index of its SQLite or PostgreSQL table). So every write of
// an existing record carries a revision, rev, a random value each write
// replaces, and before writing over revision r a writer inserts the turn
// document {_id: <record _id> NUL r NUL 0} into Collection+".turns".
// Exactly one writer of revision r wins that insert; the others (another
// claim, a completion, release, renewal or sweep that read the same
// revision) meet the duplicate key, read the record again and decide anew
// on what the winner wrote. The winner writes by _id alone, so one record
// revision is written over once: a stale key retaken by two processes has
// one new owner, and a zombie's completion racing the retake either wins
// the turn (and the retake sees a completed record) or loses it (and
// returns idem.ErrLeaseLost). A new key needs no turn: its insert is the
// claim.
//
// Turns are not deleted after the write: a writer that read revision r a
// moment before the winner wrote must still find r's turn taken. A writer
// gives up (an error to retry) when more than turnAbandon passed since it
// read the record, and Sweep deletes turns older than turnRetention, so a
// deleted turn is one no writer can still ask for. A turn whose writer died
// between the insert and the write is skipped once it is turnStale old: the
// next writer takes the turn <id> NUL r NUL 1, and so on. The residual
// risk is a write that the server applies more than turnStale after its
// writer took the turn (held in the server that long), racing the writer
// that skipped it.

const (
	// turnAbandon: a writer whose read of the record is older than this
	// reads it again before taking a turn, and does not write.
	turnAbandon = 10 * time.Second
	// turnStale: a turn older than this whose record was not written over
	// is a dead writer's; the next writer skips it.
	turnStale = time.Minute
	// turnRetention: Sweep deletes turns older than this.
	turnRetention = 10 * time.Minute
	// maxTurnRounds bounds how often one write finds the turn of the
	// revision it read taken and reads again.
	maxTurnRounds = 64
	// maxTurnSkips bounds the stale turns of one revision skipped.
	maxTurnSkips = 8
)

// fRev is the record's revision field.
const fRev = "rev"

// turnDoc is a turn: the right, taken by inserting it, to write over one
// revision of one record. At is the taker's clock.
type turnDoc struct {
	ID string    `bson:"_id"`
	At time.Time `bson:"at"`
}

// newRev is a fresh random revision.
func newRev() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errTurnAbandoned: the writer took too long between reading the record
// and writing it; another writer may already have skipped its turn.
var errTurnAbandoned = errors.New("mongoidem: the write took too long after its read; retry")

// takeTurn takes the turn to write over revision rev of the record with
// _id id, read at readAt. It reports false when another writer holds it
// (read the record again).
func (s *Store) takeTurn(ctx context.Context, id, rev string, readAt time.Time) (bool, error) {
	for n := range maxTurnSkips {
		if time.Since(readAt) > turnAbandon {
			return false, errTurnAbandoned
		}
		name := id + "\x00" + rev + "\x00" + strconv.Itoa(n)
		_, err := s.turns.InsertOne(ctx, turnDoc{ID: name, At: time.Now()})
		if err == nil {
			if time.Since(readAt) > turnAbandon {
				return false, errTurnAbandoned
			}
			return true, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return false, err
		}
		var t turnDoc
		err = s.turns.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Decode(&t)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return false, nil // swept: long over, and so is the revision
		}
		if err != nil {
			return false, err
		}
		if time.Since(t.At) < turnStale {
			return false, nil
		}
		// A dead writer's turn: take the next one of this revision.
	}
	return false, fmt.Errorf("mongoidem: %d stale turns on one revision of %q", maxTurnSkips, id)
}

// sweepTurns deletes the turns older than turnRetention (by this process's
// clock): no writer can still ask for them.
func (s *Store) sweepTurns(ctx context.Context) error {
	_, err := s.turns.DeleteMany(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$lt", Value: time.Now().Add(-turnRetention)}}}})
	return err
}

// turnBackoff spaces the reads of a writer waiting for another's turn to
// end: the other write is one round trip away.
type turnBackoff struct{ d time.Duration }

func (b *turnBackoff) wait(ctx context.Context) error {
	b.d = min(max(2*b.d, time.Millisecond), 20*time.Millisecond)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// setRev returns update with rev added to its $set (or a $set of it).
func setRev(update bson.D, rev string) bson.D {
	out := make(bson.D, 0, len(update)+1)
	done := false
	for _, el := range update {
		if set, ok := el.Value.(bson.D); ok && el.Key == "$set" && !done {
			el.Value = append(append(bson.D{}, set...), bson.E{Key: fRev, Value: rev})
			done = true
		}
		out = append(out, el)
	}
	if !done {
		out = append(out, bson.E{Key: "$set", Value: bson.D{{Key: fRev, Value: rev}}})
	}
	return out
}
