package idemhttp

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("a", MaxKeyLen)
	cases := []struct {
		in, want string
		err      error
	}{
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{`  "abc"  `, "abc", nil},
		{`"with space"`, "with space", nil},
		{`"q\"uote\\"`, `q"uote\`, nil},
		{`"k";a=1;b;c="x;y";d=?1;e=:aGk=:;f=tok/en;g=-1.5`, "k", nil},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{`bare;not-a-param`, "bare;not-a-param", nil},
		{long, long, nil},
		{`"` + long + `"`, long, nil},
		{``, "", idem.ErrNoKey},
		{`   `, "", idem.ErrNoKey},
		{`""`, "", idem.ErrInvalidKey},
		{`"abc`, "", idem.ErrInvalidKey},
		{`"a\b"`, "", idem.ErrInvalidKey},
		{`"abc\`, "", idem.ErrInvalidKey},
		{"\"tab\there\"", "", idem.ErrInvalidKey},
		{`"é"`, "", idem.ErrInvalidKey},
		{`"abc" junk`, "", idem.ErrInvalidKey},
		{`"abc";`, "", idem.ErrInvalidKey},
		{`"abc";A=1`, "", idem.ErrInvalidKey},
		{`"abc";a=`, "", idem.ErrInvalidKey},
		{`"abc";a=?2`, "", idem.ErrInvalidKey},
		{`"abc";a=:x`, "", idem.ErrInvalidKey},
		{`"abc";a="x`, "", idem.ErrInvalidKey},
		{`"abc", "def"`, "", idem.ErrInvalidKey},
		{`two words`, "", idem.ErrInvalidKey},
		{"ctl\x01", "", idem.ErrInvalidKey},
		{long + "a", "", idem.ErrInvalidKey},
		{`"` + long + `a"`, "", idem.ErrInvalidKey},
	}
	for _, tc := range cases {
		got, err := ParseKey(tc.in)
		if tc.err != nil {
			var ke *idem.KeyError
			if !errors.Is(err, tc.err) || !errors.As(err, &ke) {
				t.Errorf("ParseKey(%q) = %q, %v; want a *idem.KeyError wrapping %v", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestStoredIDNeverCollides(t *testing.T) {
	pairs := [][2]string{{"a|b", "c"}, {"a", "b|c"}, {`a\`, "|c"}, {"a", `\|c`}, {"", "a|b|c"}, {"a|b|c", ""}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		id := storedID(p[0], p[1])
		if q, dup := seen[id]; dup {
			t.Fatalf("%q and %q share stored id %q", p, q, id)
		}
		seen[id] = p
	}
}

// FuzzParseKey checks that the parser never panics, that what it accepts is a
// valid key, and that FormatKey's output parses back to the same key.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `abc`, `"a\"b\\c"`, `"k";a=1;b;c="x";d=?0;e=:AA==:`,
		`""`, `"`, `\`, `"abc" x`, `"a";`, `"a";a=-`, `"a";a=1.`, "\"\x7f\"", strings.Repeat("z", 300),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := ParseKey(in)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidKey) && !errors.Is(err, idem.ErrNoKey) {
				t.Fatalf("ParseKey(%q): untyped error %v", in, err)
			}
			return
		}
		if len(key) == 0 || len(key) > MaxKeyLen {
			t.Fatalf("ParseKey(%q) accepted a %d-character key", in, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) accepted byte %#x", in, key[i])
			}
		}
		back, err := ParseKey(FormatKey(key))
		if err != nil || back != key {
			t.Fatalf("FormatKey(%q) = %q parses to %q, %v", key, FormatKey(key), back, err)
		}
		if err := (idem.Key{Scope: "s", ID: storedID("p", key)}).Validate(); err != nil {
			t.Fatalf("key %q makes an invalid idem key: %v", key, err)
		}
	})
}
