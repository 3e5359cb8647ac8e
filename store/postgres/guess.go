package postgres

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/idemgo/idem"
)

// A transactional marker has three ways to go: the insert alone (markNew),
// cheapest for a new key, which needs a second statement to read the record
// when the key exists; the insert that reads the record when it inserts
// nothing (markNewOrGet), one round trip for a redelivery at about a fifth
// more server time for a new key (BENCH.md); and, before InTx's transaction
// begins, the read alone, outside it, which settles a redelivery in one
// round trip with no transaction, and costs a new key a round trip more
// (for the keys the store marked lately, and for all while most keys come
// out recorded).
// With Options.MarkWithFirstStatement it also chooses whether to defer the
// marker, which pays for a new key and costs a redelivery its handler's
// first statement, a rollback and a rerun. Both choices rest on a guess of
// whether the key is recorded, from two cheap signals kept here: the keys
// the store marked lately, and the share of recorded keys among its other
// markers. A wrong guess costs a statement or a round trip, never an
// outcome: the statements decide.

// recentSlots is the size of recentKeys: 256 KiB a Store.
const recentSlots = 1 << 15

// recentKeys is a lossy set of the keys whose marker a Store inserted
// lately (less those whose transaction of InTx did not commit): a
// direct-mapped table of their 64-bit hashes, where a later key overwrites
// an earlier one of the same slot, so it remembers up to the last few ten
// thousand. A key found there is most likely a redelivery (a lost
// acknowledgement, a producer's retry): its marker reads the record first
// (before the transaction begins, or in the insert's statement) and is
// never deferred. Safe for concurrent use; a lost update is a lost hint. A
// nil *recentKeys remembers nothing.
type recentKeys struct {
	seed  maphash.Seed
	slots []atomic.Uint64
}

func newRecentKeys() *recentKeys {
	return &recentKeys{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, recentSlots)}
}

// hash is k's hash, never 0 (an empty slot).
func (r *recentKeys) hash(k idem.Key) uint64 {
	return maphash.Comparable(r.seed, k) | 1
}

// add notes k as marked, and returns its hash for forget (0 when r is
// nil).
func (r *recentKeys) add(k idem.Key) uint64 {
	if r == nil {
		return 0
	}
	h := r.hash(k)
	r.slots[h&(recentSlots-1)].Store(h)
	return h
}

// forget takes back the note of add that returned h, unless a later key
// took its slot: the transaction that marked the key did not commit.
func (r *recentKeys) forget(h uint64) {
	if r != nil && h != 0 {
		r.slots[h&(recentSlots-1)].CompareAndSwap(h, 0)
	}
}

// has reports whether k was marked lately (or shares its 63-bit hash with a
// key that was).
func (r *recentKeys) has(k idem.Key) bool {
	if r == nil {
		return false
	}
	h := r.hash(k)
	return r.slots[h&(recentSlots-1)].Load() == h
}

// redeliveries estimates the share of recorded keys among a store's recent
// markers of keys it did not mark lately (recentKeys): an exponentially
// weighted moving average over their outcomes, each weighing
// 1/2^redeliveryShift, in fixed point (redeliveryOne is a share of 1). A
// steady stream of new keys keeps it near 0; a run of redeliveries of keys
// the store does not remember (a consumer restarting from an old offset, a
// queue redelivering after an outage, a partition moved from another
// instance) raises it. Safe for concurrent use; a lost update changes
// nothing that matters.
type redeliveries struct{ share atomic.Int64 }

const (
	redeliveryOne   = 1 << 20
	redeliveryShift = 5 // about the last 32 markers
	// rareBelow is the share under which recorded keys count as rare:
	// markers are then the insert alone, and deferred with
	// MarkWithFirstStatement. A deferred marker saves a new key one round
	// trip and costs a recorded one two and its handler's first
	// statement; the insert alone saves a new key a fifth of the
	// statement and costs a recorded one a round trip; both pay below
	// about a third. A quarter keeps a margin, and the estimate of a
	// steady 10% stays under it (its standard deviation over 32 markers is
	// about 0.04). A run of recorded keys crosses it after about nine in
	// a row, and about 35 new keys after the run bring it back under.
	rareBelow = redeliveryOne / 4
	// mostlyFrom is the share from which recorded keys count as most:
	// a marker in a transaction that has not begun then reads the record
	// first, outside it, which saves a recorded key a round trip (the read
	// settles it with no transaction) and costs a new one a round trip (the
	// read finds nothing, then the marker goes with BEGIN): it pays above
	// a half. A run of recorded keys crosses it after about 22 in a row.
	mostlyFrom = redeliveryOne / 2
)

// observe counts one marker's outcome: recorded is true when its key was
// recorded already.
func (r *redeliveries) observe(recorded bool) {
	var x int64
	if recorded {
		x = redeliveryOne
	}
	for {
		old := r.share.Load()
		if r.share.CompareAndSwap(old, old+(x-old)>>redeliveryShift) {
			return
		}
	}
}

// rare reports whether recorded keys have been rare lately.
func (r *redeliveries) rare() bool { return r.share.Load() < rareBelow }

// mostly reports whether most keys have been recorded lately.
func (r *redeliveries) mostly() bool { return r.share.Load() >= mostlyFrom }
