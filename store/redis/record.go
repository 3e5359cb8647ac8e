package redisstore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemgo/idem"
)

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

// roundMs is t as the store keeps it (millisecond precision).
func roundMs(t time.Time) time.Time {
	r, _ := msTime(msArg(t))
	return r
}

// str converts a Lua reply element (a bulk string or false/nil) to a string.
func str(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	case int64:
		return strconv.FormatInt(s, 10)
	}
	return ""
}

// decodeRecord builds a record from the values of recordFields, in order.
func decodeRecord(vals []any) (idem.Record, bool, error) {
	if len(vals) != len(recordFields) {
		return idem.Record{}, false, fmt.Errorf("redisstore: record reply has %d fields, want %d", len(vals), len(recordFields))
	}
	if vals[3] == nil {
		return idem.Record{}, false, nil // no state: no record
	}
	f := make([]string, len(vals))
	for i, v := range vals {
		f[i] = str(v)
	}
	r := idem.Record{
		Scope:       f[0],
		ID:          f[1],
		DisplayID:   f[2],
		State:       idem.State(f[3]),
		Fingerprint: f[4],
	}
	if r.DisplayID == "" {
		r.DisplayID = r.ID
	}
	if f[5] != "" {
		r.Result = []byte(f[5])
	}
	var err error
	if r.Token, err = strconv.ParseInt(f[6], 10, 64); err != nil {
		return idem.Record{}, false, fmt.Errorf("redisstore: record %s/%s: token %q: %w", r.Scope, r.ID, f[6], err)
	}
	if r.Attempts, err = strconv.Atoi(f[7]); err != nil {
		return idem.Record{}, false, fmt.Errorf("redisstore: record %s/%s: attempts %q: %w", r.Scope, r.ID, f[7], err)
	}
	for i, dst := range []*time.Time{&r.LeaseUntil, &r.ExpiresAt, &r.CreatedAt, &r.UpdatedAt} {
		if *dst, err = msTime(f[8+i]); err != nil {
			return idem.Record{}, false, fmt.Errorf("redisstore: record %s/%s: %s %q: %w", r.Scope, r.ID, recordFields[8+i], f[8+i], err)
		}
	}
	return r, true, nil
}

// decodeClaim interprets claimScript's reply for req.
func decodeClaim(req idem.ClaimRequest, reply any) (idem.Claim, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) < 2 {
		return idem.Claim{}, fmt.Errorf("redisstore: unexpected claim reply %T", reply)
	}
	code, _ := arr[0].(int64)
	switch code {
	case replyAcquired:
		if len(arr) != 6 {
			return idem.Claim{}, fmt.Errorf("redisstore: acquired reply has %d elements", len(arr))
		}
		tok, err := strconv.ParseInt(str(arr[2]), 10, 64)
		if err != nil {
			return idem.Claim{}, fmt.Errorf("redisstore: claim token %q: %w", str(arr[2]), err)
		}
		att, err := strconv.Atoi(str(arr[3]))
		if err != nil {
			return idem.Claim{}, fmt.Errorf("redisstore: claim attempts %q: %w", str(arr[3]), err)
		}
		created, err := msTime(str(arr[4]))
		if err != nil {
			return idem.Claim{}, fmt.Errorf("redisstore: claim created_at %q: %w", str(arr[4]), err)
		}
		retaken, _ := arr[1].(int64)
		return idem.Claim{
			Outcome: idem.ClaimAcquired,
			Retaken: retaken == 1,
			Record: idem.Record{
				Scope: req.Key.Scope, ID: req.Key.StoredID(), DisplayID: req.Key.DisplayID(),
				State: idem.StateInProgress, Fingerprint: str(arr[5]),
				Token: tok, Attempts: att,
				LeaseUntil: roundMs(req.LeaseUntil), ExpiresAt: roundMs(req.ExpiresAt),
				CreatedAt: created, UpdatedAt: roundMs(req.Now),
			},
		}, nil
	case replyDuplicate, replyInProgress, replyStale:
		vals, ok := arr[1].([]any)
		if !ok {
			return idem.Claim{}, fmt.Errorf("redisstore: unexpected claim record %T", arr[1])
		}
		r, found, err := decodeRecord(vals)
		if err != nil {
			return idem.Claim{}, err
		}
		if !found {
			return idem.Claim{}, fmt.Errorf("redisstore: claim reply without a record")
		}
		o := idem.ClaimDuplicate
		switch code {
		case replyInProgress:
			o = idem.ClaimInProgress
		case replyStale:
			o = idem.ClaimStale
		}
		return idem.Claim{Outcome: o, Record: r}, nil
	}
	return idem.Claim{}, fmt.Errorf("redisstore: unexpected claim reply code %v", arr[0])
}

// claimArgs are claimScript's ARGV for req.
func claimArgs(req idem.ClaimRequest) []any {
	take := "0"
	if req.TakeOverStale {
		take = "1"
	}
	id := req.Key.StoredID()
	display := req.Key.DisplayID()
	if display == id {
		display = ""
	}
	return []any{nowArg(req.Now), msArg(req.LeaseUntil), msArg(req.ExpiresAt), req.Fingerprint, take,
		req.Key.Scope, id, display}
}
