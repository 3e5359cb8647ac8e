package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Headers every broker integration puts on a dead letter, beside its own
// (the original subject, topic, sequence or offset). Together they let an
// operator decide from the headers alone: why it was dead-lettered, and, for
// a conflict, which content holds the key (the stored record's fingerprint,
// state and first-claim time) against the content of this message.
const (
	HeaderReason            = "Idem-Reason"             // DeadLetterReason: conflict, no_key, invalid_key, parked, invalid_data, permanent, ...
	HeaderError             = "Idem-Error"              // the error text, one line, at most 1 KiB
	HeaderDeadLetterKey     = "Idem-Key"                // scope/id of the message, when it had one
	HeaderFingerprint       = "Idem-Fingerprint"        // the message's fingerprint
	HeaderStoredFingerprint = "Idem-Stored-Fingerprint" // the fingerprint the key is recorded with
	HeaderStoredState       = "Idem-Stored-State"       // the stored record's state
	HeaderStoredToken       = "Idem-Stored-Token"       // the stored record's fencing token
	HeaderStoredCreatedAt   = "Idem-Stored-Created-At"  // when the key was first claimed (RFC 3339, UTC)
	HeaderStoredAttempts    = "Idem-Stored-Attempts"    // how many times the key was claimed
)

// StoredStateNone is the Idem-Stored-State of a dead letter whose key has
// no record once its delivery is settled: a transactional inbox whose
// marker rolled back with the failed transaction, a key swept since.
const StoredStateNone = "none"

// DeadLetterHeaders returns the idem headers of a dead letter for the call
// that returned (res, err): the reason and error always; the key when the
// message had one; the message's fingerprint for a conflict; and the stored
// record (fingerprint, state, token, attempts, first-claim time) as
// res.Record holds it, when it holds one. Result.Record is the record as the
// call left it (released after a failed two-phase handler, none after a
// rolled-back inbox transaction); broker integrations read the store once
// the delivery is settled and set what it holds with SetStoredHeaders, so
// that the headers never describe a record that does not exist. Broker
// integrations add their own transport headers.
func DeadLetterHeaders(res Result, err error) map[string]string {
	h := map[string]string{HeaderReason: DeadLetterReason(err)}
	if err != nil {
		h[HeaderError] = oneLine(err.Error(), 1024)
	}
	if res.Key.ID != "" {
		h[HeaderDeadLetterKey] = res.Key.String()
	}
	var ce *ConflictError
	if errors.As(err, &ce) {
		h[HeaderFingerprint] = ce.Fingerprint
		if res.Record.State == "" {
			res.Record = ce.Record
		}
	}
	if res.Record.State != "" {
		SetStoredHeaders(h, &res.Record)
	}
	return h
}

// SetStoredHeaders sets the Idem-Stored-* headers of h to describe r, the
// record the store holds for the dead letter's key, replacing any set
// before. With r nil (the store holds no record for the key),
// Idem-Stored-State is StoredStateNone and the other stored headers are
// removed.
func SetStoredHeaders(h map[string]string, r *Record) {
	for _, name := range []string{HeaderStoredFingerprint, HeaderStoredState, HeaderStoredToken, HeaderStoredCreatedAt, HeaderStoredAttempts} {
		delete(h, name)
	}
	if r == nil {
		h[HeaderStoredState] = StoredStateNone
		return
	}
	h[HeaderStoredFingerprint] = r.Fingerprint
	h[HeaderStoredState] = string(r.State)
	h[HeaderStoredToken] = strconv.FormatInt(r.Token, 10)
	h[HeaderStoredAttempts] = strconv.Itoa(r.Attempts)
	if !r.CreatedAt.IsZero() {
		h[HeaderStoredCreatedAt] = r.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
}

// oneLine makes s one line of valid UTF-8 of at most max bytes, cut at a
// character boundary: header values travel through every broker.
func oneLine(s string, max int) string {
	s = strings.ToValidUTF8(strings.NewReplacer("\r", " ", "\n", " ").Replace(s), "?")
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// RetryAfter is how long a broker integration waits before the next delivery
// of a message whose call returned (res, err) and Decide said ActionRetry.
// A key in progress elsewhere waits for the holder's lease to end
// (res.Record.LeaseUntil as of now), plus up to a tenth more (at most a
// second) of jitter so that duplicates do not return together: the
// redelivery then finds the record completed (a duplicate, acked), renewed
// (in progress again, wait again) or stale (retaken). Everything else waits
// fallback, the integration's back-off for the attempt.
//
// Where the broker counts redeliveries toward a limit (JetStream
// MaxDeliver, Service Bus MaxDeliveryCount), the integration should hold the
// message for this long rather than nak it, so that a live duplicate spends
// no deliveries.
func RetryAfter(res Result, err error, now time.Time, fallback time.Duration) time.Duration {
	if !errors.Is(err, ErrInProgress) || res.Record.LeaseUntil.IsZero() {
		return fallback
	}
	d := res.Record.LeaseUntil.Sub(now)
	if d < 0 {
		d = 0
	}
	jitter := min(d/10, time.Second)
	return d + 10*time.Millisecond + rand.N(jitter+1)
}

// DedupID is the id a producer gives a broker's own duplicate detection
// (JetStream's Nats-Msg-Id, Service Bus MessageId with duplicate detection,
// Kafka's idempotent producer needs none): the message id with a digest of
// its content. Retries of the same content share it and collapse at the
// broker; an id reused with other content gets another one, so the broker
// delivers it and the consumer's record dead-letters it as a conflict
// instead of the broker dropping it unseen. fingerprint is the message's
// fingerprint (PayloadFingerprint or the guard's FingerprintFunc); with
// none, the id alone.
func DedupID(id, fingerprint string) string {
	if fingerprint == "" {
		return id
	}
	sum := sha256.Sum256([]byte(fingerprint))
	return id + "~" + hex.EncodeToString(sum[:8])
}

// IsDedupID reports whether dedup is what DedupID makes of id with some
// fingerprint: id itself, or id, "~" and 16 lower-case hex digits. A
// consumer that finds the plain id beside the broker's dedup id (an
// Idem-Id header beside Nats-Msg-Id or MessageID) checks with it that the
// two belong together before it reads the message by the plain one.
func IsDedupID(dedup, id string) bool {
	if dedup == id {
		return true
	}
	rest, ok := strings.CutPrefix(dedup, id+"~")
	return ok && isHex16(rest)
}

// replayMark separates, in a replay's dedup id, the original's from the
// nonce that makes it the replay's own.
const replayMark = "~replay-"

// ReplayDedupID is a broker dedup id of its own for a replay of a message
// whose dedup id was id: id, "~replay-" and 16 hex digits of a random
// nonce. A broker's duplicate window (JetStream's Duplicates, Service
// Bus's duplicate detection, RabbitMQ's deduplication plugin) remembers
// the original's id and would drop, unseen, a replay that carried it; the
// consumer deduplicates by the key, not by the broker's id, and reads a
// replay's id back as the original's with OriginalDedupID, so the guard
// sees the replay as it saw the original. The id of a replay (of a replay's
// dead letter) is first taken back to its original's, so that replaying
// again does not grow it. Each call gives another id: two replays of one
// dead letter are two messages to the broker, and the consumer's record
// makes the second a duplicate.
func ReplayDedupID(id string) string {
	id, _ = OriginalDedupID(id)
	nonce := strconv.FormatUint(rand.Uint64(), 16)
	return id + replayMark + strings.Repeat("0", 16-len(nonce)) + nonce
}

// OriginalDedupID returns the dedup id that id, a replay's
// (ReplayDedupID's form: "~replay-" and 16 hex digits at its end), was
// made from, and ok true; any other id is returned as it is, with ok
// false.
func OriginalDedupID(id string) (orig string, ok bool) {
	i := strings.LastIndex(id, replayMark)
	if i < 0 || !isHex16(id[i+len(replayMark):]) {
		return id, false
	}
	return id[:i], true
}

// isHex16 reports whether s is 16 lower-case hex digits.
func isHex16(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}
