package redisidem

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// Record encoding. Each record is one string value, a text header and the
// variable-length parts after it:
//
//	1|<state>|<token>|<attempts>|<lease_until>|<expires_at>|<created_at>|<updated_at>|<len fp>|<len scope>|<len id>|<len display>|<fp><scope><id><display><result>
//
// "1" is the format version; times are unix milliseconds, empty for a zero
// time; display is empty unless the id was hashed; the result is whatever
// follows (binary-safe). One string rather than a hash is what makes a claim
// cheap: an absent key is claimed with a plain SET NX (no script), and
// scripts read and write a record with one GET and one SET instead of a
// command per field. The header keeps the record legible in redis-cli GET.
//
// The Lua twin of this code is luaRecord in scripts.go.

const formatVersion = "1"

// headerFields is the number of '|'-terminated fields before the body.
const headerFields = 12

// maxHeaderLen bounds the header (version, longest state, ten 20-digit
// numbers and separators), so readers that need only the header fetch a
// prefix of the value.
const maxHeaderLen = 256

var errMalformed = errors.New("redisidem: malformed record value")

// msArg encodes a stored time as unix milliseconds; the zero time is "" so
// that "no expiry" stays distinct from 1970.
func msArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// nowArg encodes the request's Now, which scripts compare against: always a
// number.
func nowArg(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// ttlMs is the key's Redis expiry for a record that expires at expires by
// the caller's clock, measured from the caller's now: milliseconds, at
// least 1 (PX). A duration is what Redis's clock and the caller's agree on;
// an absolute PXAT of the caller's time would expire the key early (two
// owners) when the caller's clock is behind Redis's and late when it is
// ahead. It rounds as the scripts do (whole milliseconds of both).
func ttlMs(expires, now time.Time) int64 {
	return max(1, expires.UnixMilli()-now.UnixMilli())
}

// ttlArg is the key's Redis expiry for r written at now, as a script
// argument: "" (no expiry) for an in-progress record, which never expires
// however long ago its lease ended, and for a record without a retention
// end (written by an older version); ttlMs otherwise.
func ttlArg(r idem.Record, now time.Time) string {
	if r.State == idem.StateInProgress || r.ExpiresAt.IsZero() {
		return ""
	}
	return strconv.FormatInt(ttlMs(r.ExpiresAt, now), 10)
}

// msTime decodes msArg's encoding.
func msTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(n).UTC(), nil
}

// encodeRecord renders r in the stored format. DisplayID is stored only
// when it differs from ID. It runs on every claim and completion, so it
// appends into one buffer.
func encodeRecord(r idem.Record) string {
	display := r.DisplayID
	if display == r.ID {
		display = ""
	}
	b := make([]byte, 0, 112+len(r.Fingerprint)+len(r.Scope)+len(r.ID)+len(display)+len(r.Result))
	b = append(b, formatVersion+"|"...)
	b = append(b, r.State...)
	b = append(b, '|')
	b = strconv.AppendInt(b, r.Token, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, '|')
	for _, t := range [...]time.Time{r.LeaseUntil, r.ExpiresAt, r.CreatedAt, r.UpdatedAt} {
		if !t.IsZero() {
			b = strconv.AppendInt(b, t.UnixMilli(), 10)
		}
		b = append(b, '|')
	}
	for _, n := range [...]int{len(r.Fingerprint), len(r.Scope), len(r.ID), len(display)} {
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, '|')
	}
	b = append(b, r.Fingerprint...)
	b = append(b, r.Scope...)
	b = append(b, r.ID...)
	b = append(b, display...)
	b = append(b, r.Result...)
	return string(b)
}

// header is the decoded header of a record value; body is what follows it.
type header struct {
	fields [headerFields]string
	body   string
}

func splitHeader(v string) (header, error) {
	var h header
	rest := v
	for i := range h.fields {
		j := strings.IndexByte(rest, '|')
		if j < 0 {
			return header{}, errMalformed
		}
		h.fields[i], rest = rest[:j], rest[j+1:]
	}
	if h.fields[0] != formatVersion {
		return header{}, fmt.Errorf("%w: format version %q", errMalformed, h.fields[0])
	}
	h.body = rest
	return h, nil
}

// times decodes lease_until, expires_at, created_at, updated_at.
func (h header) times() (lease, expires, created, updated time.Time, err error) {
	var errs [4]error
	lease, errs[0] = msTime(h.fields[4])
	expires, errs[1] = msTime(h.fields[5])
	created, errs[2] = msTime(h.fields[6])
	updated, errs[3] = msTime(h.fields[7])
	return lease, expires, created, updated, errors.Join(errs[:]...)
}

// decodeRecord parses a stored value.
func decodeRecord(v string) (idem.Record, error) {
	h, err := splitHeader(v)
	if err != nil {
		return idem.Record{}, err
	}
	var lens [4]int
	total := 0
	for i := range lens {
		n, err := strconv.Atoi(h.fields[8+i])
		if err != nil || n < 0 {
			return idem.Record{}, fmt.Errorf("%w: length %q", errMalformed, h.fields[8+i])
		}
		lens[i] = n
		total += n
	}
	if total > len(h.body) {
		return idem.Record{}, fmt.Errorf("%w: body shorter than its lengths", errMalformed)
	}
	r := idem.Record{State: idem.State(h.fields[1])}
	if r.Token, err = strconv.ParseInt(h.fields[2], 10, 64); err != nil {
		return idem.Record{}, fmt.Errorf("%w: token %q", errMalformed, h.fields[2])
	}
	if r.Attempts, err = strconv.Atoi(h.fields[3]); err != nil {
		return idem.Record{}, fmt.Errorf("%w: attempts %q", errMalformed, h.fields[3])
	}
	if r.LeaseUntil, r.ExpiresAt, r.CreatedAt, r.UpdatedAt, err = h.times(); err != nil {
		return idem.Record{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	body := h.body
	r.Fingerprint, body = body[:lens[0]], body[lens[0]:]
	r.Scope, body = body[:lens[1]], body[lens[1]:]
	r.ID, body = body[:lens[2]], body[lens[2]:]
	r.DisplayID, body = body[:lens[3]], body[lens[3]:]
	if r.DisplayID == "" {
		r.DisplayID = r.ID
	}
	if len(body) > 0 {
		r.Result = []byte(body)
	}
	return r, nil
}

// freshRecord is the record a claim of an absent key writes, with its
// times as the store keeps them (whole milliseconds, UTC) and the request's
// fresh token (req is Prepare'd: NewToken is set).
func freshRecord(req idem.ClaimRequest) idem.Record {
	now := roundMs(req.Now)
	return idem.Record{
		Scope: req.Key.Scope, ID: req.Key.StoredID(), DisplayID: req.Key.DisplayID(),
		State: idem.StateInProgress, Fingerprint: req.Fingerprint, Token: req.NewToken, Attempts: 1,
		LeaseUntil: roundMs(req.LeaseUntil), ExpiresAt: roundMs(req.ExpiresAt), CreatedAt: now, UpdatedAt: now,
	}
}

// roundMs is t as the store keeps it: whole milliseconds, UTC; zero stays
// zero.
func roundMs(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}
