package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/broker/kafka"
)

// TestMessageOfContentType: MessageOf reads the content type as
// idem.Message.Header would, deterministically: the header named exactly
// content-type (its first value) wherever it is, else the first one named
// so in another case; the ID is the idempotency-key header's first value.
func TestMessageOfContentType(t *testing.T) {
	hs := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	tests := []struct {
		name    string
		headers []kgo.RecordHeader
		ct, id  string
	}{
		{"none", nil, "", ""},
		{"exact", hs("content-type", "a", kafka.DefaultKeyHeader, "k"), "a", "k"},
		{"other case", hs("Content-Type", "b"), "b", ""},
		{"exact after other case", hs("CONTENT-TYPE", "b", "content-type", "a"), "a", ""},
		{"exact empty wins", hs("content-type", "", "Content-Type", "b"), "", ""},
		{"first of other cases", hs("Content-Type", "b", "CONTENT-TYPE", "c"), "b", ""},
		{"repeats: first value", hs("content-type", "a", "content-type", "z", kafka.DefaultKeyHeader, "k1", kafka.DefaultKeyHeader, "k2"), "a", "k1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := kafka.MessageOf(&kgo.Record{Value: []byte("v"), Headers: tc.headers})
			if m.ContentType != tc.ct || m.ID != tc.id {
				t.Errorf("content type %q, id %q; want %q, %q", m.ContentType, m.ID, tc.ct, tc.id)
			}
			if got := m.Header("content-type"); tc.name != "first of other cases" && got != m.ContentType {
				t.Errorf("Header(content-type) = %q, ContentType %q", got, m.ContentType)
			}
		})
	}
}
