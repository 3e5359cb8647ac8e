package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// checkGuardMessage fails unless a guard with the default options reads the
// same key, fingerprint and correlation id, and sees the same content type,
// in guardMessage(rec) as in MessageOf(rec).
func checkGuardMessage(t *testing.T, g *idem.Guard, rec *kgo.Record) {
	t.Helper()
	full, lite := kafka.MessageOf(rec), kafka.GuardMessage(rec)
	k1, e1 := g.Key(full)
	k2, e2 := g.Key(lite)
	if k1 != k2 || (e1 == nil) != (e2 == nil) || (e1 != nil && e1.Error() != e2.Error()) {
		t.Fatalf("%v: key %v %v, guardMessage's %v %v", rec.Headers, k1, e1, k2, e2)
	}
	f1, _ := g.Fingerprint(full)
	f2, _ := g.Fingerprint(lite)
	if f1 != f2 {
		t.Fatalf("%v: fingerprint %q, guardMessage's %q", rec.Headers, f1, f2)
	}
	c1, c2 := g.Options().Correlation(full), g.Options().Correlation(lite)
	if c1 != c2 {
		t.Fatalf("%v: correlation %q, guardMessage's %q", rec.Headers, c1, c2)
	}
	if full.ContentType != lite.ContentType || full.ID != lite.ID {
		t.Fatalf("%v: content type %q id %q, guardMessage's %q %q", rec.Headers, full.ContentType, full.ID, lite.ContentType, lite.ID)
	}
}

func TestGuardMessage(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "g"})
	if err != nil {
		t.Fatal(err)
	}
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	for _, hs := range [][]kgo.RecordHeader{
		nil,
		h(kafka.DefaultKeyHeader, "o-1"),
		h(kafka.DefaultKeyHeader, "o-1", kafka.DefaultKeyHeader, "o-2"),
		h(kafka.DefaultKeyHeader, " "),
		h("other", "x"),
		h(kafka.DefaultKeyHeader, "o-1", "traceparent", validTP),
		h(kafka.DefaultKeyHeader, "o-1", "Traceparent", validTP),
		h(kafka.DefaultKeyHeader, "o-1", "Traceparent", "bad", "traceparent", validTP),
		h(kafka.DefaultKeyHeader, "o-1", "traceparent", validTP, "traceparent", "bad"),
		h(kafka.DefaultKeyHeader, "o-1", "traceparent", "not-a-trace"),
		h(kafka.DefaultKeyHeader, "o-1", "Content-Type", "a", "content-type", "b"),
		h(kafka.DefaultKeyHeader, "o-1", "content-type", "b", "CONTENT-TYPE", "a"),
		h("Content-Type", "a", "CONTENT-TYPE", "c", kafka.DefaultKeyHeader, "o-1"),
		h(strings.ToUpper(kafka.DefaultKeyHeader), "o-1"),
	} {
		checkGuardMessage(t, g, &kgo.Record{Value: []byte(`{"n":1}`), Headers: hs})
	}
}

// FuzzGuardMessage: for any headers (keys and values from the input, some
// of them the ones the guard reads), guardMessage answers the default
// guard as MessageOf does.
func FuzzGuardMessage(f *testing.F) {
	f.Add(kafka.DefaultKeyHeader, "o-1", "traceparent", validTP, "content-type", "a", []byte("p"))
	f.Add("Traceparent", validTP, kafka.DefaultKeyHeader, "", "Content-Type", "b", []byte{})
	f.Add(kafka.DefaultKeyHeader, "x", kafka.DefaultKeyHeader, "y", "TRACEPARENT", "00-"+strings.Repeat("0", 32)+"-00f067aa0ba902b7-01", []byte("{}"))
	g, err := idem.New(memory.New(), idem.Options{Scope: "g"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string, payload []byte) {
		// A header key repeated in two cases makes Message.Header's
		// answer depend on the map's order; one case per name here.
		seen := map[string]string{}
		for _, k := range []string{k1, k2, k3} {
			if prev, ok := seen[strings.ToLower(k)]; ok && prev != k {
				return
			}
			seen[strings.ToLower(k)] = k
		}
		rec := &kgo.Record{Value: payload, Headers: []kgo.RecordHeader{{Key: k1, Value: []byte(v1)}, {Key: k2, Value: []byte(v2)}, {Key: k3, Value: []byte(v3)}}}
		checkGuardMessage(t, g, rec)
	})
}

// A consumer reads records without their header map only when its guard
// reads nothing else (Key, Fingerprint and Correlation at their defaults).
func TestConsumerReadsHeadersForItsGuard(t *testing.T) {
	noop := kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil })
	for i, tc := range []struct {
		name string
		opts idem.Options
		with idem.KeyFunc // Guard.With's key, when not nil
		lite bool
	}{
		{"defaults", idem.Options{}, nil, true},
		{"a key of its own", idem.Options{Key: idem.HeaderKey("x-id")}, nil, false},
		{"a fingerprint of its own", idem.Options{Fingerprint: idem.HeadersFingerprint("v")}, nil, false},
		{"payload fingerprint set", idem.Options{Fingerprint: idem.PayloadFingerprint}, nil, false},
		{"a correlation of its own", idem.Options{Correlation: idem.HeaderCorrelation("x-request-id")}, nil, false},
		{"With another key", idem.Options{}, idem.CloudEventsKey, false},
		{"With the scope alone", idem.Options{}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("lite-%d", i)
			tc.opts.Scope = group
			g, err := idem.New(memory.New(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.with != nil || strings.HasPrefix(tc.name, "With") {
				if g, err = g.With(group+"-with", tc.with); err != nil {
					t.Fatal(err)
				}
			}
			cl, err := kgo.NewClient(kafka.ClientOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup(group), kgo.ConsumeTopics("t"))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			c, err := kafka.NewConsumer(cl, g, noop, kafka.Options{DeadLetterTopic: "t.dlq"})
			if err != nil {
				t.Fatal(err)
			}
			if c.Lite() != tc.lite {
				t.Fatalf("reads records without their headers: %v, want %v", c.Lite(), tc.lite)
			}
		})
	}
}
