package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

type keyCtx struct{}

// ContextWithKey returns a context carrying key. The guard does this for its
// handlers; HTTP middleware and job runners may too.
func ContextWithKey(ctx context.Context, key Key) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFromContext returns the key of the message being processed.
func KeyFromContext(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(keyCtx{}).(Key)
	return k, ok
}

// DeriveKey returns a stable child key for a downstream call made while
// processing the message in ctx (name says which call: "charge", "send-mail").
// The same message and name always give the same key, on every redelivery and
// every instance, so the downstream service deduplicates the call too; other
// names, messages or scopes give other keys. It returns "" when ctx carries no
// key.
//
// The key is "idem-" followed by 40 hex digits (160 bits of SHA-256): short
// enough for any API's Idempotency-Key limit, and it does not reveal the id.
func DeriveKey(ctx context.Context, name string) string {
	k, ok := KeyFromContext(ctx)
	if !ok {
		return ""
	}
	return k.Derive(name)
}

// Derive returns the stable child key of k for name; see DeriveKey.
func (k Key) Derive(name string) string {
	h := sha256.New()
	writeLenPrefixed(h, []byte(k.Scope))
	writeLenPrefixed(h, []byte(k.StoredID()))
	writeLenPrefixed(h, []byte(name))
	return "idem-" + hex.EncodeToString(h.Sum(nil)[:20])
}
