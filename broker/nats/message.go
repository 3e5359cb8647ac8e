package natsidem

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
	"github.com/nats-io/nats.go/jetstream"
)

// MessageOf builds the idem.Message the guard sees: ID from the Nats-Msg-Id
// header, Headers from the NATS headers (the first value of each), Payload
// from the data and ContentType from the Content-Type header (any case).
// Transport values that change on redelivery (sequences, delivery count) are
// deliberately left out.
func MessageOf(msg jetstream.Msg) idem.Message {
	im := idem.Message{Payload: msg.Data()}
	h := msg.Headers()
	if len(h) == 0 {
		return im
	}
	im.Headers = make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			im.Headers[k] = v[0]
		}
	}
	im.ID = h.Get(jetstream.MsgIDHeader)
	im.ContentType = im.Header("Content-Type")
	return im
}

// ScopeFor returns the scope a guard for cons should use:
// "<stream>/<consumer name>". Consumer names are unique within a stream only,
// so the stream is part of the identity. It returns "" when cons has no
// cached info (a consumer value not obtained from the server).
func ScopeFor(cons jetstream.Consumer) string {
	info := cons.CachedInfo()
	if info == nil || info.Name == "" {
		return ""
	}
	return info.Stream + "/" + info.Name
}

// NewGuard is idem.New with opts.Scope defaulting to ScopeFor(cons).
func NewGuard(store idem.Store, cons jetstream.Consumer, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if cons == nil {
			return nil, fmt.Errorf("%w: natsidem: nil consumer", idem.ErrInvalidOptions)
		}
		opts.Scope = ScopeFor(cons)
	}
	return idem.New(store, opts)
}

// maxHeaderValue bounds the error text put in a dead-letter header.
const maxHeaderValue = 1024

// headerValue makes s safe as a NATS header value: one line, bounded.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxHeaderValue {
		cut := maxHeaderValue
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
