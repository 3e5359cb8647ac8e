package idem_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgo/idem"
)

func TestKeyExtractors(t *testing.T) {
	tests := []struct {
		name    string
		fn      idem.KeyFunc
		msg     idem.Message
		want    string
		wantErr error
	}{
		{"message id", idem.MessageID, idem.Message{ID: "m-1"}, "m-1", nil},
		{"message id missing", idem.MessageID, idem.Message{}, "", idem.ErrNoKey},
		{"message id blank", idem.MessageID, idem.Message{ID: "  "}, "", idem.ErrNoKey},
		{"header", idem.HeaderKey("Idempotency-Key"), idem.Message{Headers: map[string]string{"idempotency-key": "k1"}}, "k1", nil},
		{"header missing", idem.HeaderKey("Idempotency-Key"), idem.Message{}, "", idem.ErrNoKey},
		{"json fields", idem.JSONFieldsKey("tenant", "order"), idem.Message{Payload: []byte(`{"tenant":"acme","order":42,"x":1}`)}, "acme|42", nil},
		{"json fields escape", idem.JSONFieldsKey("a", "b"), idem.Message{Payload: []byte(`{"a":"x|y","b":"z"}`)}, `x\|y|z`, nil},
		{"json field missing", idem.JSONFieldsKey("order"), idem.Message{Payload: []byte(`{"tenant":"acme"}`)}, "", idem.ErrNoKey},
		{"json field null", idem.JSONFieldsKey("order"), idem.Message{Payload: []byte(`{"order":null}`)}, "", idem.ErrNoKey},
		{"json field object", idem.JSONFieldsKey("order"), idem.Message{Payload: []byte(`{"order":{}}`)}, "", idem.ErrInvalidKey},
		{"json not object", idem.JSONFieldsKey("order"), idem.Message{Payload: []byte(`[1]`)}, "", idem.ErrInvalidKey},
		{"composite", idem.Composite(idem.HeaderKey("tenant"), idem.MessageID), idem.Message{ID: "7", Headers: map[string]string{"tenant": "t"}}, "t|7", nil},
		{"composite part missing", idem.Composite(idem.HeaderKey("tenant"), idem.MessageID), idem.Message{ID: "7"}, "", idem.ErrNoKey},
		{"first of", idem.FirstOf(idem.HeaderKey("x"), idem.MessageID), idem.Message{ID: "7"}, "7", nil},
		{"first of none", idem.FirstOf(idem.HeaderKey("x"), idem.MessageID), idem.Message{}, "", idem.ErrNoKey},
		{"user func", func(m idem.Message) (string, error) { return strings.ToUpper(m.ID), nil }, idem.Message{ID: "ab"}, "AB", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.msg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				var ke *idem.KeyError
				if !errors.As(err, &ke) || ke.Reason == "" {
					t.Fatalf("err %v is not a *KeyError with a reason", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCloudEventsKey(t *testing.T) {
	tests := []struct {
		name    string
		msg     idem.Message
		want    string
		wantErr error
	}{
		{"kafka binary", idem.Message{Headers: map[string]string{"ce_specversion": "1.0", "ce_id": "A234", "ce_source": "/orders"}}, "/orders|A234", nil},
		{"http binary", idem.Message{Headers: map[string]string{"Ce-Id": "1", "Ce-Source": "s"}}, "s|1", nil},
		{"amqp binary", idem.Message{Headers: map[string]string{"cloudEvents:id": "1", "cloudEvents:source": "s"}}, "s|1", nil},
		{"binary missing source", idem.Message{Headers: map[string]string{"ce_specversion": "1.0", "ce_id": "1"}}, "", idem.ErrInvalidKey},
		{"structured", idem.Message{ContentType: "application/cloudevents+json; charset=utf-8",
			Payload: []byte(`{"specversion":"1.0","id":"e1","source":"urn:shop","type":"order.created","data":{}}`)}, "urn:shop|e1", nil},
		{"structured sniffed", idem.Message{Payload: []byte(`{"specversion":"1.0","id":"e1","source":"s"}`)}, "s|e1", nil},
		{"structured malformed", idem.Message{ContentType: "application/cloudevents+json", Payload: []byte(`{"id":`)}, "", idem.ErrInvalidKey},
		{"structured numeric id", idem.Message{ContentType: "application/cloudevents+json", Payload: []byte(`{"specversion":"1.0","id":5,"source":"s"}`)}, "", idem.ErrInvalidKey},
		{"structured no id", idem.Message{ContentType: "application/cloudevents+json", Payload: []byte(`{"specversion":"1.0","source":"s"}`)}, "", idem.ErrInvalidKey},
		{"plain json is not an event", idem.Message{Payload: []byte(`{"id":"x"}`)}, "", idem.ErrNoKey},
		{"nothing", idem.Message{Payload: []byte("hello")}, "", idem.ErrNoKey},
		{"source with separator", idem.Message{Headers: map[string]string{"ce_id": "1", "ce_source": "a|b"}}, `a\|b|1`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := idem.CloudEventsKey(tc.msg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestKeyValidateAndStoredID(t *testing.T) {
	long := strings.Repeat("a", idem.MaxIDLen+1)
	k := idem.Key{Scope: "s", ID: long}
	if got := k.StoredID(); !strings.HasPrefix(got, "sha256:") || len(got) != 71 {
		t.Fatalf("StoredID of a long id = %q", got)
	}
	if (idem.Key{Scope: "s", ID: long + "b"}).StoredID() == k.StoredID() {
		t.Fatal("two long ids hash alike")
	}
	if k.DisplayID() != long {
		t.Fatal("DisplayID lost the original")
	}
	short := idem.Key{Scope: "s", ID: "abc"}
	if short.StoredID() != "abc" {
		t.Fatal("short ids must be stored as is")
	}
	huge := idem.Key{Scope: "s", ID: strings.Repeat("é", idem.MaxDisplayLen)}
	if d := huge.DisplayID(); len(d) > idem.MaxDisplayLen || !strings.HasPrefix(huge.ID, d) {
		t.Fatalf("DisplayID of huge id: %d bytes", len(d))
	}
	bad := []struct {
		k    idem.Key
		want error
	}{
		{idem.Key{ID: "x"}, idem.ErrInvalidKey},
		{idem.Key{Scope: "s"}, idem.ErrNoKey},
		{idem.Key{Scope: "s", ID: "a\x00b"}, idem.ErrInvalidKey},
		{idem.Key{Scope: "s", ID: "\xff"}, idem.ErrInvalidKey},
		{idem.Key{Scope: strings.Repeat("s", idem.MaxScopeLen+1), ID: "x"}, idem.ErrInvalidKey},
	}
	for _, b := range bad {
		if err := b.k.Validate(); !errors.Is(err, b.want) {
			t.Errorf("Validate(%q) = %v, want %v", b.k, err, b.want)
		}
	}
}

func TestFingerprints(t *testing.T) {
	a := idem.Message{Payload: []byte(`{"order":1,"amount":10,"sent_at":"t1"}`)}
	b := idem.Message{Payload: []byte(`{"order":1,"amount":10,"sent_at":"t2"}`)}
	c := idem.Message{Payload: []byte(`{"order":1,"amount":11,"sent_at":"t1"}`)}
	pa, _ := idem.PayloadFingerprint(a)
	pb, _ := idem.PayloadFingerprint(b)
	if pa == pb || len(pa) != 64 {
		t.Fatalf("payload fingerprints %q %q", pa, pb)
	}
	ff := idem.FieldsFingerprint("order", "amount")
	fa, _ := ff(a)
	fb, _ := ff(b)
	fc, _ := ff(c)
	if fa != fb || fa == fc {
		t.Fatalf("field fingerprints: a=%s b=%s c=%s", fa, fb, fc)
	}
	if _, err := ff(idem.Message{Payload: []byte("nope")}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("fields fingerprint of non-JSON: %v", err)
	}
	if idem.Fingerprint([]byte("ab"), []byte("c")) == idem.Fingerprint([]byte("a"), []byte("bc")) {
		t.Fatal("Fingerprint parts are not length-prefixed")
	}
	hf := idem.HeadersFingerprint("tenant")
	h1, _ := hf(idem.Message{Payload: []byte("x"), Headers: map[string]string{"tenant": "a"}})
	h2, _ := hf(idem.Message{Payload: []byte("x"), Headers: map[string]string{"tenant": "b"}})
	if h1 == h2 {
		t.Fatal("headers fingerprint ignores the header")
	}
	if fp, _ := idem.NoFingerprint(a); fp != "" {
		t.Fatal("NoFingerprint returned a fingerprint")
	}
}

func TestListFilterPageLimit(t *testing.T) {
	for limit, want := range map[int]int{0: idem.DefaultListLimit, -5: idem.DefaultListLimit, 1: 1, 250: 250} {
		if got := (idem.ListFilter{Limit: limit}).PageLimit(); got != want {
			t.Errorf("Limit %d: PageLimit %d, want %d", limit, got, want)
		}
	}
}

// TestKeyStringLongIDs: a long id is shortened for logs and headers to valid
// UTF-8, whatever its characters, and two long ids with one prefix stay
// apart.
func TestKeyStringLongIDs(t *testing.T) {
	for _, id := range []string{strings.Repeat("é", 60), strings.Repeat("a", 59) + strings.Repeat("é", 40), strings.Repeat("x", 100), strings.Repeat("🙂", 300)} {
		s := idem.Key{Scope: "s", ID: id}.String()
		if !utf8.ValidString(s) || len(s) > 2+60+len("…")+12 {
			t.Errorf("Key{%q}.String() = %q: not valid UTF-8, or too long", id, s)
		}
	}
	a, b := idem.Key{Scope: "s", ID: strings.Repeat("x", 90) + "a"}, idem.Key{Scope: "s", ID: strings.Repeat("x", 90) + "b"}
	if a.String() == b.String() {
		t.Errorf("two long ids render alike: %s", a)
	}
}
