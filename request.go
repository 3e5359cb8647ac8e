package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// MaxFingerprintLen is the longest fingerprint stored as it is. Longer
// fingerprints, and fingerprints that are not text (raw digest bytes, NUL
// bytes, invalid UTF-8), are stored as "sha256:" + the hex digest of their
// bytes (see store/storekit.StoredFingerprint): equal fingerprints stay equal, different ones
// stay different, and every store can keep any bytes a FingerprintFunc returns.
const MaxFingerprintLen = 1024

// storedFingerprint is fp as stores keep it (storekit.StoredFingerprint, for
// store authors, is the same rule): fp itself when it is valid UTF-8
// text without NUL bytes of at most MaxFingerprintLen bytes, else "sha256:"
// followed by the hex digest of its bytes. It is idempotent, so the guard and
// the store may both apply it.
func storedFingerprint(fp string) string {
	if len(fp) <= MaxFingerprintLen && utf8.ValidString(fp) && !strings.ContainsRune(fp, 0) {
		return fp
	}
	sum := sha256.Sum256([]byte(fp))
	return "sha256:" + hex.EncodeToString(sum[:])
}
