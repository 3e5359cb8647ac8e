package idem_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// Fuzz targets for the parsers of untrusted input in the root package: the
// CloudEvents extractors, JSON field keys, header keys and the fingerprint
// functions. Their seed corpora are in testdata/fuzz; CI runs each for a few
// seconds (go test -run '^$' -fuzz '^FuzzX$' -fuzztime 5s .).

// keyErr fails unless err is one of the typed key errors an extractor may
// return (a message whose key is missing or malformed is dead-lettered with
// its reason, never retried or crashed on).
func keyErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrNoKey) && !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("%s: error %v is neither ErrNoKey nor ErrInvalidKey", what, err)
	}
}

// join is the key of several parts: "|" between them, "\" and "|" escaped
// inside them, so no two lists of parts make one key.
func join(parts ...string) string {
	r := strings.NewReplacer(`\`, `\\`, `|`, `\|`)
	for i, p := range parts {
		parts[i] = r.Replace(p)
	}
	return strings.Join(parts, "|")
}

// splitKey undoes join, reporting whether key is a well-formed join.
func splitKey(key string) ([]string, bool) {
	var parts []string
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '\\':
			if i+1 == len(key) || (key[i+1] != '\\' && key[i+1] != '|') {
				return nil, false
			}
			i++
			b.WriteByte(key[i])
		case '|':
			parts = append(parts, b.String())
			b.Reset()
		default:
			b.WriteByte(key[i])
		}
	}
	return append(parts, b.String()), true
}

func FuzzCloudEventsKey(f *testing.F) {
	f.Add("ce-", "evt-1", "/orders", "1.0", "", []byte(nil))
	f.Add("ce_", "a|b", `c\d`, "", "", []byte(nil))
	f.Add("", "", "", "", "application/cloudevents+json", []byte(`{"specversion":"1.0","id":"e1","source":"/s","type":"t"}`))
	f.Add("", "", "", "", "application/json", []byte(`{"specversion":"1.0","id":7,"source":"/s"}`))
	f.Add("", "", "", "", "application/cloudevents+json", []byte(`{"specversion":"1.0","id":"e1"`))
	f.Add("cloudEvents:", " ", "/s", "1.0", "", []byte(`{}`))
	f.Fuzz(func(t *testing.T, prefix, id, source, spec, contentType string, payload []byte) {
		m := idem.Message{ContentType: contentType, Payload: payload, Headers: map[string]string{}}
		if prefix != "" {
			m.Headers[prefix+"id"], m.Headers[prefix+"source"], m.Headers[prefix+"specversion"] = id, source, spec
		}
		key, err := idem.CloudEventsKey(m)
		key2, err2 := idem.CloudEventsKey(m)
		if key != key2 || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q %v, then %q %v", key, err, key2, err2)
		}
		if err != nil {
			keyErr(t, "CloudEventsKey", err)
			return
		}
		parts, ok := splitKey(key)
		if !ok || len(parts) != 2 || strings.TrimSpace(parts[0]) == "" || strings.TrimSpace(parts[1]) == "" {
			t.Fatalf("key %q is not <source>|<id> with both parts set", key)
		}
	})
}

// FuzzCloudEventsRoundTrip: any event with a non-blank source and id, in
// either mode, is keyed by exactly that pair.
func FuzzCloudEventsRoundTrip(f *testing.F) {
	f.Add("/orders", "evt-1", true)
	f.Add("a|b", `c\|d`, false)
	f.Add("ü", "\u2028", true)
	f.Fuzz(func(t *testing.T, source, id string, binary bool) {
		if strings.TrimSpace(source) == "" || strings.TrimSpace(id) == "" || !utf8.ValidString(source) || !utf8.ValidString(id) {
			t.Skip()
		}
		var m idem.Message
		if binary {
			m = idem.Message{Headers: map[string]string{"ce-specversion": "1.0", "ce-id": id, "ce-source": source}}
		} else {
			payload, _ := json.Marshal(map[string]string{"specversion": "1.0", "id": id, "source": source, "type": "t"})
			m = idem.Message{ContentType: "application/cloudevents+json", Payload: payload}
		}
		key, err := idem.CloudEventsKey(m)
		if err != nil {
			t.Fatalf("valid event (binary %v): %v", binary, err)
		}
		if want := join(source, id); key != want {
			t.Fatalf("key %q, want %q", key, want)
		}
	})
}

func FuzzJSONFieldsKey(f *testing.F) {
	f.Add([]byte(`{"tenant":"t1","order_id":42}`), "tenant", "order_id")
	f.Add([]byte(`{"a":"x|y","b":"\\"}`), "a", "b")
	f.Add([]byte(`{"a":null,"b":1}`), "a", "b")
	f.Add([]byte(`{"a":{"nested":1},"b":[1]}`), "a", "b")
	f.Add([]byte(`[1,2]`), "a", "b")
	f.Add([]byte(`{"a":1e400,"b":-0}`), "a", "b")
	f.Add([]byte(`{"a":"1"} trailing`), "a", "a")
	f.Fuzz(func(t *testing.T, payload []byte, f1, f2 string) {
		key, err := idem.JSONFieldsKey(f1, f2)(idem.Message{Payload: payload})
		if err != nil {
			keyErr(t, "JSONFieldsKey", err)
			return
		}
		if parts, ok := splitKey(key); !ok || len(parts) != 2 || strings.TrimSpace(parts[0]) == "" || strings.TrimSpace(parts[1]) == "" {
			t.Fatalf("key %q of two fields is not two non-blank parts", key)
		}
	})
}

// FuzzJSONFieldsRoundTrip: string fields are keyed by their values.
func FuzzJSONFieldsRoundTrip(f *testing.F) {
	f.Add("tenant", "t1", "order", "o|1")
	f.Add("a", `\`, "b", " x ")
	f.Fuzz(func(t *testing.T, f1, v1, f2, v2 string) {
		if f1 == f2 || strings.TrimSpace(v1) == "" || strings.TrimSpace(v2) == "" ||
			!utf8.ValidString(f1) || !utf8.ValidString(f2) || !utf8.ValidString(v1) || !utf8.ValidString(v2) {
			t.Skip()
		}
		payload, _ := json.Marshal(map[string]string{f1: v1, f2: v2})
		key, err := idem.JSONFieldsKey(f1, f2)(idem.Message{Payload: payload})
		if err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		if want := join(v1, v2); key != want {
			t.Fatalf("key %q, want %q", key, want)
		}
	})
}

func FuzzHeaderKey(f *testing.F) {
	f.Add("idempotency-key", "k-1", "Idempotency-Key", "other")
	f.Add("x", " ", "y", "z")
	f.Add("", "", "", "v")
	f.Fuzz(func(t *testing.T, name, value, other, otherValue string) {
		m := idem.Message{Headers: map[string]string{name: value}}
		if other != name {
			m.Headers[other] = otherValue
		}
		key, err := idem.HeaderKey(name)(m)
		switch {
		case strings.TrimSpace(value) == "":
			// The header under that exact name wins over other spellings.
			if err == nil {
				t.Fatalf("blank header %q gave key %q", name, key)
			}
			keyErr(t, "HeaderKey", err)
		case err != nil:
			t.Fatalf("header %q=%q: %v", name, value, err)
		case key != value:
			t.Fatalf("header %q=%q gave key %q", name, value, key)
		}
	})
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func FuzzFingerprints(f *testing.F) {
	f.Add([]byte(`{"order":"o1","amount":5,"at":"2024-01-01"}`), "order", "h", "v")
	f.Add([]byte(`{"order":"o1"`), "order", "", "")
	f.Add([]byte(`not json`), "", "Content-Type", "text/plain")
	f.Add([]byte(`{"a":{"b":[1,2,{"c":null}]}}`), "a", "a", "b")
	f.Fuzz(func(t *testing.T, payload []byte, field, header, headerValue string) {
		m := idem.Message{Payload: payload, Headers: map[string]string{header: headerValue}}
		for name, fn := range map[string]idem.FingerprintFunc{
			"payload": idem.PayloadFingerprint, "fields": idem.FieldsFingerprint(field), "headers": idem.HeadersFingerprint(header),
		} {
			fp, err := fn(m)
			fp2, _ := fn(m)
			if fp != fp2 {
				t.Fatalf("%s: not deterministic: %q, %q", name, fp, fp2)
			}
			if err != nil {
				if name != "fields" || !errors.Is(err, idem.ErrInvalidKey) {
					t.Fatalf("%s: %v", name, err)
				}
				continue
			}
			if !hex64.MatchString(fp) {
				t.Fatalf("%s: fingerprint %q is not 64 hex digits", name, fp)
			}
		}
		// The payload's fingerprint is its SHA-256 in lower-case hex, as
		// every version of idem stored it.
		if fp, _ := idem.PayloadFingerprint(m); fp != hexSHA256(payload) {
			t.Fatalf("payload fingerprint %q, want %q", fp, hexSHA256(payload))
		}
		// Only the chosen field counts: the object holding it alone
		// (its raw value as decoded) has the same fingerprint.
		var obj map[string]json.RawMessage
		if json.Unmarshal(payload, &obj) == nil && obj != nil && utf8.ValidString(field) {
			alone := []byte("{}")
			if raw, ok := obj[field]; ok {
				name, _ := json.Marshal(field)
				alone = append(append(append([]byte("{"), name...), ':'), append(raw, '}')...)
			}
			a, errA := idem.FieldsFingerprint(field)(m)
			b, errB := idem.FieldsFingerprint(field)(idem.Message{Payload: alone})
			if errA == nil && errB == nil && a != b {
				t.Fatalf("fingerprint of %q in %s differs from that of %s", field, payload, alone)
			}
		}
		// Length-prefixed: moving a byte across a boundary changes it.
		if len(payload) > 0 {
			moved := idem.Message{Payload: payload[1:], Headers: map[string]string{header: headerValue + string(payload[:1])}}
			a, _ := idem.HeadersFingerprint(header)(m)
			b, _ := idem.HeadersFingerprint(header)(moved)
			if a == b {
				t.Fatalf("headers fingerprint did not change when a byte moved from the payload to the header")
			}
			if idem.Fingerprint([]byte(headerValue), payload) == idem.Fingerprint([]byte(headerValue+string(payload[:1])), payload[1:]) {
				t.Fatalf("Fingerprint did not change when a byte moved across parts")
			}
		}
	})
}

func hexSHA256(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}

// FuzzKeyValidate holds Key.Validate, and the guard's check of the ids it
// extracts, to the rules as written: a scope neither empty nor longer
// than MaxScopeLen; an id not blank; both valid UTF-8 without NUL.
func FuzzKeyValidate(f *testing.F) {
	for _, id := range []string{"m-1", "", " ", "\t\n", "\u00a0", "a\x00", "\x00", "é", "é\x00", "\xff", "a\xffb", " x ", "\u0085", "\x7f"} {
		f.Add("scope", id)
	}
	f.Add("", "id")
	f.Add("s\x00", "id")
	f.Add("\xc3", "id")
	f.Fuzz(func(t *testing.T, scope, id string) {
		text := func(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
		scopeOK := scope != "" && len(scope) <= idem.MaxScopeLen && text(scope)
		var want error
		switch {
		case !scopeOK:
			want = idem.ErrInvalidKey
		case strings.TrimSpace(id) == "":
			want = idem.ErrNoKey
		case !text(id):
			want = idem.ErrInvalidKey
		}
		err := idem.Key{Scope: scope, ID: id}.Validate()
		if (err == nil) != (want == nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("Key{%q, %q}.Validate() = %v, want %v", scope, id, err, want)
		}
		// A guard checks its scope once and each message's id: the same
		// answer as Validate's.
		if !scopeOK {
			return
		}
		g, gerr := idem.New(memory.New(), idem.Options{Scope: scope})
		if gerr != nil {
			t.Fatal(gerr)
		}
		_, err = g.Key(idem.Message{ID: id})
		if (err == nil) != (want == nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("Guard.Key(%q) = %v, want %v", id, err, want)
		}
	})
}
