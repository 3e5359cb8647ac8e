package redisidem

import (
	"sync"

	"github.com/idemgo/idem"
)

// maxHeld bounds the claims a Store remembers (claims whose owner never
// completed or released them would otherwise pile up). Past it an arbitrary
// entry is dropped; its Complete takes the parsing path: slower, same result.
const maxHeld = 1 << 13

// heldClaim is a claim this Store acquired: the record and its exact stored
// value.
type heldClaim struct {
	rec   idem.Record
	value string
}

// heldClaims remembers the value of each claim this Store acquired until it
// completes, releases or loses it, so those scripts can compare the stored
// value with it instead of parsing the record (see fencedPrelude). It is a
// hint only: a wrong or missing entry costs a parse, never correctness,
// because the script writes the client's transition only when the stored
// value is byte for byte the one this Store saw under its token.
type heldClaims struct {
	mu sync.Mutex
	m  map[string]heldClaim
}

// acquired remembers c, whose stored value is value, if it acquired the key.
func (h *heldClaims) acquired(key string, c idem.Claim, value string) {
	if c.Outcome == idem.ClaimAcquired {
		h.put(key, c.Record, value)
	}
}

// put remembers r, stored as value ("": as encodeRecord renders it).
func (h *heldClaims) put(key string, r idem.Record, value string) {
	if value == "" {
		value = encodeRecord(r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]heldClaim)
	}
	if _, ok := h.m[key]; !ok && len(h.m) >= maxHeld {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[key] = heldClaim{rec: r, value: value}
}

// take removes and returns the claim held on key under token.
func (h *heldClaims) take(key string, token int64) (heldClaim, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.m[key]
	if !ok {
		return heldClaim{}, false
	}
	delete(h.m, key)
	if c.rec.Token != token {
		return heldClaim{}, false
	}
	return c, true
}
