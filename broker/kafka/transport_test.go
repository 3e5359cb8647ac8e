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

// TestMessageOfHeaders: every header reaches the message with its first
// value, and its values cost MessageOf one allocation whatever their
// number: a record with six headers allocates no more than one with one.
func TestMessageOfHeaders(t *testing.T) {
	long := func(s string) []byte { return []byte(s + "-a-value-longer-than-the-tiny-allocator-takes") }
	one := &kgo.Record{Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: long("k")}}}
	six := &kgo.Record{Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: kafka.DefaultKeyHeader, Value: long("k")},
		{Key: "traceparent", Value: long("t")},
		{Key: "ce_id", Value: long("c")},
		{Key: "empty", Value: nil},
		{Key: "traceparent", Value: long("repeat")},
		{Key: "ce_source", Value: long("s")},
	}}
	m := kafka.MessageOf(six)
	want := map[string]string{kafka.DefaultKeyHeader: string(long("k")), "traceparent": string(long("t")), "ce_id": string(long("c")), "empty": "", "ce_source": string(long("s"))}
	if len(m.Headers) != len(want) || m.ID != want[kafka.DefaultKeyHeader] {
		t.Fatalf("headers %q, id %q; want %q", m.Headers, m.ID, want)
	}
	for k, v := range want {
		if m.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, m.Headers[k], v)
		}
	}
	a1 := testing.AllocsPerRun(100, func() { kafka.MessageOf(one) })
	a6 := testing.AllocsPerRun(100, func() { kafka.MessageOf(six) })
	if a6 > a1 {
		t.Errorf("MessageOf: %v allocations with six headers, %v with one; want no more", a6, a1)
	}
}
