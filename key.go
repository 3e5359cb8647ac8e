package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// MaxIDLen is the longest id stored as is. Longer ids are stored as
// "sha256:" + the hex digest (71 bytes), with the original kept for display,
// so every store can index a fixed-size column.
const MaxIDLen = 200

// MaxScopeLen is the longest scope accepted. Scopes name consumers and are
// short; a longer one is a configuration mistake.
const MaxScopeLen = 200

// Key identifies one logical message for one consumer. The stored primary key
// is (Scope, StoredID()): two subscribers of one topic use different scopes and
// never block each other.
type Key struct {
	Scope string // consumer identity: a consumer group, queue, durable name, route
	ID    string // the message's stable id, as extracted
}

// String renders the key for logs as scope/id. An id over 80 bytes is
// shortened to its first 60 bytes (cut at a character boundary, so the text
// stays valid UTF-8 for headers and properties), an ellipsis and 12 hex
// digits of its SHA-256, which tell long ids with one prefix apart.
func (k Key) String() string {
	id := k.ID
	if len(id) > 80 {
		cut := 60
		for cut > 0 && !utf8.RuneStart(id[cut]) {
			cut--
		}
		sum := sha256.Sum256([]byte(id))
		id = id[:cut] + "…" + hex.EncodeToString(sum[:6])
	}
	return k.Scope + "/" + id
}

// StoredID is the id as stores index it: the id itself up to MaxIDLen bytes,
// else "sha256:" followed by the hex digest of the id. An id that itself
// begins with "sha256:" is hashed too, whatever its length, so the two
// spaces are disjoint: a short id spelled like the digest of a long one
// names its own record, never the long one's.
func (k Key) StoredID() string {
	if len(k.ID) <= MaxIDLen && !strings.HasPrefix(k.ID, hashedPrefix) {
		return k.ID
	}
	sum := sha256.Sum256([]byte(k.ID))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// hashedPrefix starts every stored id that is a digest.
const hashedPrefix = "sha256:"

// DisplayID is the original id, kept beside the stored one so operators see
// what the producer sent. Stores keep at most MaxDisplayLen bytes of it.
func (k Key) DisplayID() string {
	if len(k.ID) <= MaxDisplayLen {
		return k.ID
	}
	cut := MaxDisplayLen
	for cut > 0 && !utf8.RuneStart(k.ID[cut]) {
		cut--
	}
	return k.ID[:cut]
}

// MaxDisplayLen bounds the original id kept for display with hashed ids.
const MaxDisplayLen = 1024

// Validate checks that the key can be stored: a non-empty scope and id, valid
// UTF-8, no NUL bytes (several databases reject them), a scope of at most
// MaxScopeLen bytes.
func (k Key) Validate() error {
	switch {
	case k.Scope == "":
		return invalidKey("empty scope (set Options.Scope to the consumer's identity)")
	case len(k.Scope) > MaxScopeLen:
		return invalidKey("scope longer than %d bytes", MaxScopeLen)
	case !isText(k.Scope):
		return invalidKey("scope is not valid UTF-8 text")
	}
	return validID(k.ID)
}

// validID is Validate's check of the id: a guard's own scope was checked
// once, by New, and only the id of each message is checked (Guard.Key).
func validID(id string) error {
	switch {
	case isBlank(id):
		return noKey("empty id")
	case !isText(id):
		return invalidKey("id is not valid UTF-8 text (%d bytes)", len(id))
	}
	return nil
}

// isText reports whether s is valid UTF-8 without a NUL byte, in one pass
// over the ASCII text ids almost always are.
func isText(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return false
		case c >= utf8.RuneSelf:
			// In valid UTF-8, a NUL byte is the NUL rune alone.
			rest := s[i:]
			return utf8.ValidString(rest) && strings.IndexByte(rest, 0) < 0
		}
	}
	return true
}

// isBlank reports whether s is empty or white space alone
// (strings.TrimSpace(s) == ""), at once for an id that starts with a
// printable ASCII byte.
func isBlank(s string) bool {
	if len(s) > 0 && s[0] > ' ' && s[0] < utf8.RuneSelf {
		return false
	}
	return strings.TrimSpace(s) == ""
}
