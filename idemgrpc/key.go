package idemgrpc

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// DefaultMetadataKey is the request metadata that carries the client's
// idempotency key, the gRPC spelling of the HTTP Idempotency-Key header.
const DefaultMetadataKey = "idempotency-key"

// MetadataReplayed is set to "true" in the header and the trailer of a reply
// (or a recorded error) replayed from the record of an earlier call with the
// same key, as idemhttp's Idempotent-Replayed.
const MetadataReplayed = "idempotent-replayed"

// MaxKeyLen is the longest client key accepted, as idemhttp.MaxKeyLen.
const MaxKeyLen = 255

func metadataKey(k string) string {
	if k == "" {
		return DefaultMetadataKey
	}
	return strings.ToLower(k)
}

// CheckKey is the default key check: 1..MaxKeyLen visible ASCII characters.
// Errors are *idem.KeyError wrapping idem.ErrNoKey or idem.ErrInvalidKey.
func CheckKey(key string) error {
	if key == "" {
		return &idem.KeyError{Reason: "the idempotency key is empty", Err: idem.ErrNoKey}
	}
	if len(key) > MaxKeyLen {
		return invalid("the key is %d characters long, the limit is %d", len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f {
			return invalid("the key holds visible ASCII characters only (byte %#02x at %d)", c, i)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return &idem.KeyError{Reason: fmt.Sprintf(format, args...), Err: idem.ErrInvalidKey}
}

// storedID combines the principal and the client's key into the id stored in
// the guard's scope, as idemhttp does: the principal first with '|' and '\'
// escaped, so the first unescaped '|' separates the two and no (principal,
// key) pair can collide with another.
func storedID(principal, key string) string {
	return escaper.Replace(principal) + "|" + key
}

var escaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`)
