package cosmos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/idemgo/idem"
)

// Partitions is the number of logical partitions the records are spread
// over (partition key values "00" to "0f", in the property PartitionKeyPath
// names). It is part of every record's address, so it is fixed: a store
// reading with another count would not find its records.
const Partitions = 16

// PartitionKeyPath is the container's partition key path.
const PartitionKeyPath = "/pk"

// address is where a key's record lives: its item id (the hex SHA-256 of
// scope and stored id, so any id fits Cosmos DB's id rules) and its
// logical partition (from the same digest, for spread).
type address struct {
	id, pk string
}

func addressOf(k idem.Key) address { return addressOfStored(k.Scope, k.StoredID()) }

func addressOfStored(scope, storedID string) address {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0}) // no NUL in a valid scope: the pair is unambiguous
	h.Write([]byte(storedID))
	sum := h.Sum(nil)
	return address{id: hex.EncodeToString(sum), pk: bucket(int(sum[0]) % Partitions)}
}

// bucket is the partition key value of partition i.
func bucket(i int) string { return fmt.Sprintf("%02x", i) }

// order is a record's place in List's order as a string Cosmos DB orders
// bytewise: hex(scope) "-" hex(stored id). Hex keeps the bytes' order and
// is ASCII, and '-' sorts before every hex digit, so a scope that is a
// prefix of another comes first, as (scope, id) compares.
func order(scope, storedID string) string {
	return hex.EncodeToString([]byte(scope)) + "-" + hex.EncodeToString([]byte(storedID))
}

// recordDoc is a record as the container holds it.
type recordDoc struct {
	ID  string `json:"id"`
	PK  string `json:"pk"`
	Ord string `json:"ord"`
	fields
	// TTL is Cosmos DB's time to live in seconds: -1 (never) while in
	// progress, the retention left once settled (ttlFor).
	TTL num `json:"ttl"`
}

// fields are a record's properties, as the store's items and a
// BatchInbox's markers hold them. Times are Unix milliseconds of the
// caller's clock.
type fields struct {
	Scope    string `json:"scope"`
	SID      string `json:"sid"`
	Display  string `json:"display,omitempty"` // when the original id is not the stored id
	State    string `json:"state"`
	FP       string `json:"fp,omitempty"`
	Result   []byte `json:"result,omitempty"`
	Token    num    `json:"token"`
	Attempts num    `json:"attempts"`
	Lease    num    `json:"lease"`
	Exp      num    `json:"exp"`
	Created  num    `json:"created"`
	Updated  num    `json:"updated"`
}

// num is an integer property. Cosmos DB keeps numbers as doubles and may
// write one back in exponent form; tokens and milliseconds stay below
// 2^53, where doubles are exact.
type num int64

func (n *num) UnmarshalJSON(b []byte) error {
	if i, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*n = num(i)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("cosmos: %s is not an integer", b)
	}
	*n = num(f)
	return nil
}

func ms(t time.Time) num { return num(t.UnixMilli()) }

func fromMS(n num) time.Time { return time.UnixMilli(int64(n)).UTC() }

// atMS is t at the store's precision.
func atMS(t time.Time) time.Time { return fromMS(ms(t)) }

// withMS returns r with its times at the store's precision.
func withMS(r idem.Record) idem.Record {
	r.LeaseUntil, r.ExpiresAt = atMS(r.LeaseUntil), atMS(r.ExpiresAt)
	r.CreatedAt, r.UpdatedAt = atMS(r.CreatedAt), atMS(r.UpdatedAt)
	return r
}

// maxTTL is the longest time to live Cosmos DB takes (seconds).
const maxTTL = math.MaxInt32

// ttlFor is the time to live of a settled record whose retention ends at
// exp, as the caller's clock reads now: the seconds left, rounded up, at
// least 1 (the server counts them from its own clock, so a caller whose
// clock is off the server's loses nothing); -1 (none) when that is past
// Cosmos DB's limit, leaving the record to Sweep.
func ttlFor(now, exp time.Time) num {
	d := exp.Sub(now)
	if d <= 0 {
		return 1
	}
	s := (d + time.Second - 1) / time.Second
	if s > maxTTL {
		return -1
	}
	return num(s)
}

// docOf is the document of r; ttl -1 unless r is settled.
func docOf(r idem.Record, now time.Time) recordDoc {
	a := addressOfStored(r.Scope, r.ID)
	d := recordDoc{ID: a.id, PK: a.pk, Ord: order(r.Scope, r.ID), fields: fieldsOf(r), TTL: -1}
	if r.State != idem.StateInProgress {
		d.TTL = ttlFor(now, r.ExpiresAt)
	}
	return d
}

func fieldsOf(r idem.Record) fields {
	f := fields{
		Scope: r.Scope, SID: r.ID, State: string(r.State), FP: r.Fingerprint, Result: r.Result,
		Token: num(r.Token), Attempts: num(r.Attempts),
		Lease: ms(r.LeaseUntil), Exp: ms(r.ExpiresAt), Created: ms(r.CreatedAt), Updated: ms(r.UpdatedAt),
	}
	if r.DisplayID != r.ID {
		f.Display = r.DisplayID
	}
	return f
}

func (f fields) record() idem.Record {
	r := idem.Record{
		Scope: f.Scope, ID: f.SID, DisplayID: f.Display, State: idem.State(f.State),
		Fingerprint: f.FP, Result: f.Result, Token: int64(f.Token), Attempts: int(f.Attempts),
		LeaseUntil: fromMS(f.Lease), ExpiresAt: fromMS(f.Exp), CreatedAt: fromMS(f.Created), UpdatedAt: fromMS(f.Updated),
	}
	if r.DisplayID == "" {
		r.DisplayID = r.ID
	}
	return r
}

// decodeDoc decodes an item the server returned.
func decodeDoc(b []byte) (recordDoc, error) {
	var d recordDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("cosmos: decoding a record: %w", err)
	}
	return d, nil
}
