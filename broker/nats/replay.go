package natsidem

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// ErrNotDeadLetter means Replay or DeadLetterOf was given a message that
// is not a dead letter of this package: it has no Idem-Subject header.
var ErrNotDeadLetter = errors.New("natsidem: not a dead letter (no " + HeaderSubject + " header)")

// ErrReplayDuplicate was returned by Replay when the stream dropped a
// replay as a duplicate of the original, whose Nats-Msg-Id it carried.
//
// Deprecated: Replay gives every replay a Nats-Msg-Id of its own, which no
// duplicate window remembers, and never returns it.
var ErrReplayDuplicate = errors.New("natsidem: replay dropped as a duplicate")

// Replay re-publishes dl, a dead letter a Consumer wrote (read back from
// the dead-letter stream), to the subject it came from (its Idem-Subject
// header), with its data and the original's headers: its Idem-Id (the
// plain id Publish sets, which MessageOf reads) and every other header of
// its own; without the headers idem put on it when dead-lettering it
// (idem.DeadLetterHeaders, Idem-Subject, Idem-Stream, Idem-Stream-Seq,
// Idem-Consumer, Idem-Deliveries and every Idem-Original-* header) and
// without the dead letter's own Nats-* headers. The original's other
// JetStream headers (Nats-Expected-*, Nats-Rollup, Nats-TTL, ...) are
// left off: they were instructions to the stream for the original publish
// (an expected last sequence that no longer holds, a roll-up that would
// purge the subject), not part of the message.
//
// The replay's Nats-Msg-Id is one of its own, idem.ReplayDedupID of the
// original's (restored from Idem-Original-Nats-Msg-Id): the original's,
// "~replay-" and a random nonce. The
// stream's duplicate window (Duplicates, two minutes by default) still
// remembers the original's, and would drop a replay that carried it; the
// consumer deduplicates by the key, not by Nats-Msg-Id, and MessageOf
// reads a replay's Nats-Msg-Id as the original's, so the guard sees the
// replay as it saw the original: same id, same key, same fingerprint. A
// dead letter whose original had no Nats-Msg-Id is replayed without one.
// Replay returns once the stream acknowledged the message; dl itself is
// not acknowledged: ack or term it once Replay returned nil. Each call is
// a replay of its own: replaying dl twice stores it twice, and the
// consumer's record makes the second a duplicate.
//
// The consumer's record then decides, as for any redelivery: a key that
// was completed meanwhile (a producer re-send processed after the dead
// letter, or an operator's fix) is a duplicate, acknowledged without
// running the handler; a key never completed is processed; content that
// conflicts with the recorded key is dead-lettered again. For that the
// record must outlive the replay: keep the guard's Retention longer than
// the longest time a dead letter may wait before it is replayed.
func Replay(ctx context.Context, js jetstream.JetStream, dl jetstream.Msg) error {
	msg, err := replayed(dl.Headers(), dl.Data())
	if err != nil {
		return err
	}
	// A Duplicate ack cannot mean the window dropped the replay: its
	// Nats-Msg-Id is new, so only this publish, retried by the client, can
	// have stored it before.
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("natsidem: replay to %s: %w", msg.Subject, err)
	}
	return nil
}

// replayed is the original message a dead letter carries.
func replayed(h nats.Header, data []byte) (*nats.Msg, error) {
	subject := h.Get(HeaderSubject)
	if subject == "" {
		return nil, ErrNotDeadLetter
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	for k, v := range h {
		switch {
		case broker.IsDeadLetterHeader(k), hasPrefixFold(k, "Nats-"):
		case hasPrefixFold(k, HeaderOriginalPrefix):
			if strings.EqualFold(k[len(HeaderOriginalPrefix):], jetstream.MsgIDHeader) && len(v) > 0 {
				msg.Header.Set(jetstream.MsgIDHeader, idem.ReplayDedupID(v[0]))
			}
		case replayDrops(k):
		default:
			msg.Header[k] = append([]string(nil), v...)
		}
	}
	return msg, nil
}

// replayDrops reports whether k is one of the transport headers the
// consumer put on a dead letter.
func replayDrops(k string) bool {
	for _, h := range []string{HeaderSubject, HeaderMsgID, HeaderStream, HeaderStreamSeq, HeaderConsumer, HeaderDeliveries} {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
