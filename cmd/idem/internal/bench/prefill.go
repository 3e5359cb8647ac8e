package bench

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/storekit"
)

// PrefillScope is the scope prefilled records live in, apart from the
// benchmark's own keys (scope idem-bench-<run>).
const PrefillScope = "idem-prefill"

// Prefill configures the records loaded before a run.
type Prefill struct {
	N           int64   // records in PrefillScope when the load is done
	Expired     float64 // share of them whose retention ended (0..1), spread over the past week
	ResultBytes int     // size of each record's stored result; 0: none
}

// PrefillResult says what the load did.
type PrefillResult struct {
	Records     int64   `json:"records"`      // records of the prefill scope the run measured beside
	Expired     int64   `json:"expired"`      // how many of them had expired when loaded
	ResultBytes int     `json:"result_bytes"` // result size of each record
	Loaded      int64   `json:"loaded"`       // records this run wrote (0: an earlier prefill was reused)
	Seconds     float64 `json:"seconds"`      // time the load (or the check of an earlier one) took
	RowsPerSec  float64 `json:"rows_per_sec"` // Loaded / Seconds
	How         string  `json:"how"`          // how the records were written
}

// ErrPrefill is wrapped by errors about a prefill the store cannot take.
var ErrPrefill = errors.New("prefill")

// prefillRecord is record n of a prefill: an id shaped like a UUIDv7 (its
// first 48 bits are n, so ids sort in n order and a chunk of consecutive
// records is one range of the primary key; the rest is pseudo-random), a
// SHA-256 fingerprint, and times as a store under a constant retention has
// them: records were created in n order over one retention period, so
// expiry follows the insertion order and the oldest ones are those whose
// retention ended. Every loader writes the same values (PostgreSQL computes
// them in SQL: pgRecordSQL).
type prefillRecord struct {
	id, fingerprint string
	token           int64
	expires         time.Time // a retention period after created
	created         time.Time
	expired         bool
}

const (
	retentionWeek = 7 * 24 * time.Hour
	mixFactor     = 2654435761
)

// layout places the records of one prefill in time: the first expired of
// them had expired at base, one every step milliseconds.
type layout struct {
	base    time.Time // the load's start, to the millisecond
	expired int64
	step    int64 // milliseconds between two records' expiry
}

// newLayout spreads n records over a retention week, the first frac of
// them expired.
func newLayout(n int64, frac float64, base time.Time) layout {
	return layout{base: base, expired: int64(math.Round(frac * float64(n))),
		step: max(1, retentionWeek.Milliseconds()/max(n, 1))}
}

// recordN is record n of a prefill laid out by l: an expired record expired
// a minute or more before l.base, a live one expires an hour or more after.
func recordN(n int64, l layout) prefillRecord {
	h := md5.Sum([]byte(strconv.FormatInt(n, 10)))
	r := hex.EncodeToString(h[:])
	fp := sha256.Sum256([]byte(strconv.FormatInt(n, 10)))
	t := fmt.Sprintf("%012x", n)
	exp := n < l.expired
	expires := l.base.Add(time.Hour + time.Duration((n-l.expired)*l.step)*time.Millisecond)
	if exp {
		expires = l.base.Add(-time.Minute - time.Duration((l.expired-1-n)*l.step)*time.Millisecond)
	}
	return prefillRecord{
		id:          t[:8] + "-" + t[8:12] + "-7" + r[0:3] + "-8" + r[3:6] + "-" + r[6:18],
		fingerprint: hex.EncodeToString(fp[:]),
		token:       1<<32 + (n*mixFactor)%(1<<40),
		expires:     expires,
		created:     expires.Add(-retentionWeek),
		expired:     exp,
	}
}

// PrefillKey is the key of record n of a prefill, and its fingerprint.
func PrefillKey(n int64) (idem.Key, string) {
	r := recordN(n, layout{})
	return idem.Key{Scope: PrefillScope, ID: r.id}, r.fingerprint
}

// resultN is record n's stored result: size bytes, its md5 repeated.
func resultN(n int64, size int) []byte {
	if size <= 0 {
		return nil
	}
	h := md5.Sum([]byte(strconv.FormatInt(n, 10)))
	out := make([]byte, size)
	for i := range out {
		out[i] = h[i%len(h)]
	}
	return out
}

// chunkRows is how many records one transaction of a load writes.
const chunkRows = 50_000

// loader writes records [a, b) of a prefill in one transaction, replacing
// any of them already there, and counts those already there.
type loader interface {
	how() string
	// present counts the records of [a, b) in the store.
	present(ctx context.Context, a, b int64) (int64, error)
	// beyond reports whether the store holds prefill records at n or above.
	beyond(ctx context.Context, n int64) (bool, error)
	load(ctx context.Context, a, b int64, p Prefill, l layout) error
	workers() int
}

// RunPrefill loads p.N records into h's store, in chunks that are each
// written in one transaction (or pipeline). A chunk the store already holds
// in full is skipped, so a second run over the same store reuses the first
// one's records, and a load cut short resumes where it stopped. A store
// holding prefill records beyond p.N is refused: the run would not measure
// at the size asked.
func RunPrefill(ctx context.Context, h *dsn.Handle, p Prefill) (*PrefillResult, error) {
	if p.N < 0 || p.Expired < 0 || p.Expired > 1 || p.ResultBytes < 0 {
		return nil, fmt.Errorf("%w: want N ≥ 0, 0 ≤ expired share ≤ 1, result size ≥ 0", ErrPrefill)
	}
	l, err := newLoader(h)
	if err != nil {
		return nil, err
	}
	res := &PrefillResult{Records: p.N, ResultBytes: p.ResultBytes, How: l.how()}
	start := time.Now()
	if more, err := l.beyond(ctx, p.N); err != nil {
		return nil, err
	} else if more {
		return nil, fmt.Errorf("%w: the store holds more than %d records in scope %s; use another table (?table=) or a larger --prefill", ErrPrefill, p.N, PrefillScope)
	}
	lay := newLayout(p.N, p.Expired, time.Now().UTC().Truncate(time.Millisecond))
	var (
		next   atomic.Int64
		loaded atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
	)
	for range l.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				a := next.Add(chunkRows) - chunkRows
				if a >= p.N {
					return
				}
				b := min(a+chunkRows, p.N)
				have, err := l.present(ctx, a, b)
				if err == nil && have < b-a {
					err = l.load(ctx, a, b, p, lay)
					loaded.Add(b - a - have)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("prefill records %d..%d: %w", a, b, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Expired = lay.expired
	res.Loaded = loaded.Load()
	res.Seconds = time.Since(start).Seconds()
	if res.Loaded > 0 && res.Seconds > 0 {
		res.RowsPerSec = float64(res.Loaded) / res.Seconds
	}
	return res, nil
}

// newLoader picks the fastest way into h's store: server-side generation
// for PostgreSQL, multi-row inserts for MariaDB and SQLite, and the store's
// own batch claims and completes for the others (Redis pipelines them).
func newLoader(h *dsn.Handle) (loader, error) {
	tabled, _ := h.Native.(interface{ Table() string })
	switch {
	case h.PG != nil && tabled != nil:
		return &pgLoader{pool: h.PG, table: tabled.Table()}, nil
	case h.SQL != nil && tabled != nil && h.Scheme == "mysql":
		return &sqlLoader{db: h.SQL, table: "`" + tabled.Table() + "`", dialect: "mysql", par: 2}, nil
	case h.SQL != nil && tabled != nil && h.Scheme == "sqlite":
		return &sqlLoader{db: h.SQL, table: `"` + tabled.Table() + `"`, dialect: "sqlite", par: 1}, nil
	}
	if _, ok := h.Store.(storekit.BatchStore); ok {
		return &storeLoader{s: h.Store}, nil
	}
	return nil, fmt.Errorf("%w: the %s store has no way to prefill", ErrPrefill, h.Scheme)
}

// storeLoader writes records through the store's own API: one batch claim
// per 1000 records, then a complete of each from 16 goroutines. Records
// cannot be written already expired this way.
type storeLoader struct{ s idem.Store }

func (l *storeLoader) how() string  { return "the store's batch claims and completes" }
func (l *storeLoader) workers() int { return 2 }

func (l *storeLoader) key(n int64) idem.Key {
	k, _ := PrefillKey(n)
	return k
}

func (l *storeLoader) has(ctx context.Context, n int64) (bool, error) {
	_, err := l.s.Get(ctx, l.key(n))
	if errors.Is(err, idem.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// present checks the chunk's first and last records: a chunk is written
// in order, so both there means the chunk is (expired records aside).
func (l *storeLoader) present(ctx context.Context, a, b int64) (int64, error) {
	for _, n := range []int64{a, b - 1} {
		if ok, err := l.has(ctx, n); err != nil || !ok {
			return 0, err
		}
	}
	return b - a, nil
}

func (l *storeLoader) beyond(ctx context.Context, n int64) (bool, error) { return l.has(ctx, n) }

func (l *storeLoader) load(ctx context.Context, a, b int64, p Prefill, lay layout) error {
	if p.Expired > 0 {
		return fmt.Errorf("%w: this store's records can only be prefilled live (--prefill-expired 0)", ErrPrefill)
	}
	bs := l.s.(storekit.BatchStore)
	const batch = 1000
	for lo := a; lo < b; lo += batch {
		hi := min(lo+batch, b)
		now := time.Now()
		reqs := make([]idem.ClaimRequest, 0, hi-lo)
		for n := lo; n < hi; n++ {
			r := recordN(n, layout{base: now, step: lay.step})
			reqs = append(reqs, idem.ClaimRequest{Key: l.key(n), Fingerprint: r.fingerprint, Now: now,
				LeaseUntil: now.Add(time.Minute), ExpiresAt: r.expires})
		}
		cs, err := bs.ClaimBatch(ctx, reqs)
		if err != nil {
			return err
		}
		var (
			wg    sync.WaitGroup
			next  atomic.Int64
			first atomic.Value
		)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(len(cs)); i = next.Add(1) - 1 {
					if cs[i].Outcome != idem.ClaimAcquired {
						continue // already there
					}
					err := l.s.Complete(ctx, idem.CompleteRequest{Key: reqs[i].Key, Token: cs[i].Record.Token, Now: now,
						ExpiresAt: reqs[i].ExpiresAt, Result: resultN(lo+i, p.ResultBytes)})
					if err != nil {
						first.CompareAndSwap(nil, err)
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := first.Load().(error); err != nil {
			return err
		}
	}
	return nil
}
