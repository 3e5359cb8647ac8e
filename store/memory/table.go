package memory

import (
	"hash/maphash"
	"time"

	"github.com/idemgo/idem"
)

// table is how the store holds its records: in slots without pointers, in
// chunks the collector never scans, found through an index of the keys'
// hashes and their slot numbers (without pointers either). The text of the
// records (ids, display ids, fingerprints) lives in one byte slice; a
// result, when there is one, in a map beside. A record as idem.Record holds
// ten pointers (its strings, its times' locations): a store of them was a
// large part of the collector's work at every cycle of a busy consumer, and
// a map keyed by two strings hashed and compared both at every step.
// Records become idem.Records only to be decided on (storekit) and handed
// out, and a claim's answer reuses the request's strings.
//
// Every method is called with the store's mu held.
type table struct {
	seed  maphash.Seed
	index index // hash of (scope, stored id) -> slot

	chunks [][]slot
	made   int32   // slots made
	free   []int32 // swept slots, taken first
	live   int

	// The live records' ids, display ids and fingerprints, in pages that
	// are filled and never grown (a slice grown by append would be copied
	// over and over).
	pages [][]byte
	used  int // bytes of the pages
	dead  int // bytes of them that no live record uses any more

	scopes    []string
	scopeOf   map[string]uint32
	lastScope uint32 // the scope of the latest call: a consumer's calls share one
	states    []idem.State
	locs      []*time.Location
	lastLoc   uint32
	results   map[int32][]byte // the slots with a result

	// The slot of the latest key found or inserted, and its stored id: a
	// claim's complete (or renewal) finds it without hashing.
	last   int32
	lastID string
}

// chunkShift sets the slots one allocation makes: 128 of them, 20 KB,
// below the size the allocator takes from the heap one by one.
const chunkShift = 7

// pageSize is the size of a page of text; a longer string has a page of
// its own.
const pageSize = 32 << 10

// span is a string of the table's text: n bytes at off in a page.
type span struct {
	page, off, n int32
}

// stamp is a time.Time without its pointer: the location is an index into
// the table's locations. Record times carry no monotonic reading.
type stamp struct {
	sec  int64
	nsec int32
	loc  uint32
}

// slot is one record. state 0 is a free slot.
type slot struct {
	hash      uint32
	scope     uint32
	id, fp    span
	display   span
	ownDisp   bool // the display id is not the stored id (a long id)
	hasResult bool
	state     uint8 // index+1 into states
	token     int64
	attempts  int
	lease     stamp
	expires   stamp
	created   stamp
	updated   stamp
}

func newTable() *table {
	return &table{
		seed:    maphash.MakeSeed(),
		scopeOf: make(map[string]uint32),
		states:  []idem.State{idem.StateInProgress, idem.StateCompleted, idem.StateReleased},
		locs:    []*time.Location{time.UTC},
		results: make(map[int32][]byte),
		last:    -1,
	}
}

func (t *table) at(i int32) *slot { return &t.chunks[i>>chunkShift][i&(1<<chunkShift-1)] }

func (t *table) bytes(s span) []byte {
	if s.n == 0 {
		return nil
	}
	return t.pages[s.page][s.off : s.off+s.n]
}

func (t *table) str(s span) string { return string(t.bytes(s)) }

func (t *table) is(s span, v string) bool { return string(t.bytes(s)) == v }

// scope returns the number of scope; ok is false when no record has had it
// (and add is false).
func (t *table) scope(scope string, add bool) (n uint32, ok bool) {
	if int(t.lastScope) < len(t.scopes) && t.scopes[t.lastScope] == scope {
		return t.lastScope, true
	}
	n, ok = t.scopeOf[scope]
	if !ok {
		if !add {
			return 0, false
		}
		n = uint32(len(t.scopes))
		t.scopes = append(t.scopes, scope)
		t.scopeOf[scope] = n
	}
	t.lastScope = n
	return n, true
}

// hash is 32 bits of the key's hash: the index's entries are then 8
// bytes, and a larger share of it stays in the caches; the keys that
// share a hash are few.
func (t *table) hash(scope uint32, id string) uint32 {
	h := maphash.String(t.seed, id) ^ (uint64(scope)+1)*0x9e3779b97f4a7c15
	return uint32(h ^ h>>32)
}

// place is where a key would go: its hash.
type place struct {
	hash uint32
}

// find returns the slot of (scope, id), or -1 and where it would go.
func (t *table) find(scope uint32, id string) (int32, place) {
	if t.last >= 0 && t.lastID == id && t.at(t.last).scope == scope {
		return t.last, place{}
	}
	h := t.hash(scope, id)
	x := &t.index
	if len(x.e) == 0 {
		return -1, place{h}
	}
	for p := h & x.mask; x.e[p] != 0; p = (p + 1) & x.mask {
		if e := x.e[p]; uint32(e>>32) == h {
			i := int32(uint32(e)) - 1
			if s := t.at(i); s.scope == scope && t.is(s.id, id) {
				t.last, t.lastID = i, id
				return i, place{}
			}
		}
	}
	return -1, place{h}
}

// lookup is find for a key, when its scope may be unknown.
func (t *table) lookup(k idem.Key) int32 {
	sc, ok := t.scope(k.Scope, false)
	if !ok {
		return -1
	}
	i, _ := t.find(sc, k.StoredID())
	return i
}

// insert makes a slot for r, whose key in scope find did not find at p,
// and returns it.
func (t *table) insert(scope uint32, p place, r *idem.Record) int32 {
	var i int32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if int(t.made)>>chunkShift == len(t.chunks) {
			t.chunks = append(t.chunks, make([]slot, 1<<chunkShift))
		}
		i = t.made
		t.made++
	}
	s := t.at(i)
	*s = slot{hash: p.hash, scope: scope, id: t.add(r.ID)}
	if r.DisplayID != r.ID {
		s.display, s.ownDisp = t.add(r.DisplayID), true
	}
	t.index.add(p.hash, i)
	// The next call is most likely this key's complete.
	t.last, t.lastID = i, r.ID
	t.live++
	t.write(i, r)
	return i
}

// add puts v in the text.
func (t *table) add(v string) span {
	if v == "" {
		return span{}
	}
	t.used += len(v)
	n := len(t.pages)
	if n == 0 || cap(t.pages[n-1])-len(t.pages[n-1]) < len(v) {
		t.pages = append(t.pages, make([]byte, 0, max(pageSize, len(v))))
		n++
	}
	p := t.pages[n-1]
	sp := span{page: int32(n - 1), off: int32(len(p)), n: int32(len(v))}
	t.pages[n-1] = append(p, v...)
	return sp
}

// write sets slot i to r (all but its key). r.Result is the store's from
// then on.
func (t *table) write(i int32, r *idem.Record) {
	s := t.at(i)
	if !t.is(s.fp, r.Fingerprint) {
		t.dead += int(s.fp.n)
		s.fp = t.add(r.Fingerprint)
	}
	t.setResult(i, r.Result)
	s.state = t.stateCode(r.State)
	s.token, s.attempts = r.Token, r.Attempts
	s.lease, s.expires = t.stamp(r.LeaseUntil), t.stamp(r.ExpiresAt)
	s.created, s.updated = t.stamp(r.CreatedAt), t.stamp(r.UpdatedAt)
}

// record returns slot i as an idem.Record (its Result the store's own),
// with the strings of scope, id and fp (a fingerprint the caller has at
// hand) when they are the record's: a claim's answer allocates nothing.
func (t *table) record(i int32, scope, id, fp string) idem.Record {
	s := t.at(i)
	r := idem.Record{Scope: scope, ID: id, DisplayID: id, Token: s.token, Attempts: s.attempts,
		State: t.states[s.state-1], LeaseUntil: t.time(s.lease), ExpiresAt: t.time(s.expires),
		CreatedAt: t.time(s.created), UpdatedAt: t.time(s.updated)}
	if s.ownDisp {
		r.DisplayID = t.str(s.display)
	}
	if t.is(s.fp, fp) {
		r.Fingerprint = fp
	} else {
		r.Fingerprint = t.str(s.fp)
	}
	if s.hasResult {
		r.Result = t.results[i]
	}
	return r
}

// full is record for a caller without the record's strings at hand.
func (t *table) full(i int32) idem.Record {
	s := t.at(i)
	return t.record(i, t.scopes[s.scope], t.str(s.id), "")
}

// remove frees slot i.
func (t *table) remove(i int32) {
	s := t.at(i)
	t.index.remove(s.hash, i)
	if s.hasResult {
		delete(t.results, i)
	}
	if t.last == i {
		t.last, t.lastID = -1, ""
	}
	t.dead += int(s.id.n + s.fp.n + s.display.n)
	*s = slot{}
	t.free = append(t.free, i)
	t.live--
	if t.dead > 4*pageSize && t.dead > t.used/2 {
		t.compact()
	}
}

// compact copies the live records' text into pages of their own, leaving
// the dead bytes behind.
func (t *table) compact() {
	old := t.pages
	t.pages, t.used, t.dead = nil, 0, 0
	move := func(sp *span) {
		if sp.n > 0 {
			*sp = t.add(string(old[sp.page][sp.off : sp.off+sp.n]))
		}
	}
	for i := range t.made {
		if s := t.at(i); s.state != 0 {
			move(&s.id)
			move(&s.fp)
			move(&s.display)
		}
	}
}

// each calls f with every live slot until f returns false.
func (t *table) each(f func(i int32) bool) {
	for i := range t.made {
		if t.at(i).state != 0 && !f(i) {
			return
		}
	}
}

func (t *table) stateCode(st idem.State) uint8 {
	for i, s := range t.states {
		if s == st {
			return uint8(i + 1)
		}
	}
	t.states = append(t.states, st)
	return uint8(len(t.states))
}

func (t *table) stamp(x time.Time) stamp {
	return stamp{sec: x.Unix(), nsec: int32(x.Nanosecond()), loc: t.loc(x.Location())}
}

func (t *table) loc(l *time.Location) uint32 {
	if t.locs[t.lastLoc] == l {
		return t.lastLoc
	}
	for i, x := range t.locs {
		if x == l {
			t.lastLoc = uint32(i)
			return t.lastLoc
		}
	}
	t.locs = append(t.locs, l)
	t.lastLoc = uint32(len(t.locs) - 1)
	return t.lastLoc
}

func (t *table) time(s stamp) time.Time {
	return time.Unix(s.sec, int64(s.nsec)).In(t.locs[s.loc])
}

// setResult makes res slot i's result (none when empty).
func (t *table) setResult(i int32, res []byte) {
	s := t.at(i)
	if len(res) > 0 {
		t.results[i] = res
		s.hasResult = true
	} else if s.hasResult {
		delete(t.results, i)
		s.hasResult = false
	}
}

// index finds a key's slots by the key's hash: open addressing with
// linear probing over one slice of entries, each a hash and a slot
// number. Keys that share a hash have an entry each. A removal shifts the
// entries after it back into place, so a probe ends at the first empty
// entry and no removed entry is left behind. It was a map from a hash to
// the first slot of a chain: the map's probe and its growth were a tenth
// of a claim of a new key.
type index struct {
	e    []uint64 // hash<<32 | slot+1; 0 is empty
	n    int      // entries
	mask uint32
}

// indexMin is the fewest entries an index has once it has any.
const indexMin = 1 << 10

// indexEntry is the entry of slot i, of hash h.
func indexEntry(h uint32, i int32) uint64 { return uint64(h)<<32 | uint64(uint32(i+1)) }

// put puts e in the first empty entry from its hash's place on. The index
// has room.
func (x *index) put(e uint64) {
	p := uint32(e>>32) & x.mask
	for x.e[p] != 0 {
		p = (p + 1) & x.mask
	}
	x.e[p] = e
}

// add puts slot i, of hash h, in the index, which grows to twice its size
// when it is three quarters full.
func (x *index) add(h uint32, i int32) {
	if (x.n+1)*4 > len(x.e)*3 {
		old := x.e
		size := max(indexMin, 2*len(old))
		x.e, x.mask = make([]uint64, size), uint32(size-1)
		for _, e := range old {
			if e != 0 {
				x.put(e)
			}
		}
	}
	x.put(indexEntry(h, i))
	x.n++
}

// remove takes slot i, of hash h, which is in the index, out of it: each
// entry after it up to the next empty one moves back to the freed place
// unless its hash's own place lies after the freed one (it would then be
// found no more).
func (x *index) remove(h uint32, i int32) {
	want := indexEntry(h, i)
	p := h & x.mask
	for x.e[p] != want {
		p = (p + 1) & x.mask
	}
	for q := (p + 1) & x.mask; x.e[q] != 0; q = (q + 1) & x.mask {
		// Its own place is home; it may move to p when p is no nearer q
		// than home is (home is not in (p, q]).
		home := uint32(x.e[q]>>32) & x.mask
		if (q-home)&x.mask >= (q-p)&x.mask {
			x.e[p], p = x.e[q], q
		}
	}
	x.e[p] = 0
	x.n--
}
