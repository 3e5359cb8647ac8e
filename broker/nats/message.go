package natsidem

import (
	"fmt"

	"github.com/idemgo/idem"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// HeaderID carries the plain message id of a message sent by Publish, whose
// Nats-Msg-Id is the broker's dedup id (idem.DedupID: the id and a digest
// of the content).
const HeaderID = "Idem-Id"

// MessageOf builds the idem.Message the guard sees: ID from the Idem-Id
// header (HeaderID, set by Publish), else from the Nats-Msg-Id header;
// Headers from the NATS headers (the first value of each); Payload from the
// data and ContentType from the Content-Type header (any case). Transport
// values that change on redelivery (sequences, delivery count) are
// deliberately left out. NATS has no correlation id of its own:
// CorrelationID stays empty, and the guard's default correlation
// (idem.DefaultCorrelation) reads the producer's W3C traceparent header.
//
// For a message sent by Publish, Headers["Nats-Msg-Id"] is the plain id too
// (msg.Headers() keeps the dedup id), so a key read from that header
// (idem.HeaderKey(jetstream.MsgIDHeader)) is the producer's id, as it was
// before Publish derived the dedup id from the content. A replay's
// Nats-Msg-Id (the original's, "~replay-" and a nonce: see Replay) reads
// as the original's, in ID and in Headers: the guard sees a replay as it
// saw the original.
func MessageOf(msg jetstream.Msg) idem.Message {
	return messageOf(msg.Headers(), msg.Data())
}

func messageOf(h nats.Header, data []byte) idem.Message {
	im := idem.Message{Payload: data}
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
	if orig, ok := idem.OriginalDedupID(im.ID); ok {
		// A replay reads as its original did (see Replay).
		im.ID = orig
		im.Headers[jetstream.MsgIDHeader] = orig
	}
	if plain := h.Get(HeaderID); plain != "" {
		if idem.IsDedupID(im.ID, plain) {
			im.Headers[jetstream.MsgIDHeader] = plain
		}
		im.ID = plain
	}
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

// NewGuard returns a guard over store for a consumer of cons. The guard is
// the one place for the scope and the key: an empty opts.Scope becomes
// ScopeFor(cons), the consumer's identity, so two durable consumers of one
// stream never block each other; a set one is kept. opts.Key is kept too:
// its default, idem.MessageID, reads the id MessageOf puts in
// idem.Message.ID. Without a scope, a consumer without cached info (not
// obtained from the server) is an error wrapping idem.ErrInvalidOptions.
func NewGuard(store idem.Store, cons jetstream.Consumer, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		if cons == nil {
			return nil, fmt.Errorf("%w: natsidem: nil consumer", idem.ErrInvalidOptions)
		}
		if opts.Scope = ScopeFor(cons); opts.Scope == "" {
			return nil, fmt.Errorf("%w: natsidem: the consumer has no cached info to name the scope by; get it from the server (js.Consumer) or set idem.Options.Scope", idem.ErrInvalidOptions)
		}
	}
	return idem.New(store, opts)
}
