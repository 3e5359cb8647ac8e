package idem_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, k := range []idem.Key{
		{Scope: "billing", ID: "order-1"},
		{Scope: "billing", ID: "sha256:" + strings.Repeat("0", 64)},
		{Scope: "b", ID: strings.Repeat("x", 5000)},
		{Scope: strings.Repeat("s", idem.MaxScopeLen), ID: strings.Repeat("e", idem.MaxIDLen)},
		{Scope: "\x01", ID: "\x7f\t\U0010FFFF"},
	} {
		c := idem.Record{Scope: k.Scope, ID: k.StoredID()}.Cursor()
		s := c.String()
		if strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" || s[0] == '-' {
			t.Errorf("cursor text %q is not URL- and shell-safe", s)
		}
		p, err := idem.ParseCursor(s)
		if err != nil || p != c || p.Scope() != k.Scope || p.StoredID() != k.StoredID() {
			t.Errorf("ParseCursor(%q) = %q %v, want scope %q, stored id %.40q", s, p, err, k.Scope, k.StoredID())
		}
		js, err := json.Marshal(struct{ After idem.Cursor }{c})
		var back struct{ After idem.Cursor }
		if err != nil || json.Unmarshal(js, &back) != nil || back.After != c {
			t.Errorf("JSON %s came back as %q", js, back.After)
		}
	}
	if z, err := idem.ParseCursor(""); err != nil || !z.IsZero() || z.String() != "" {
		t.Errorf(`ParseCursor("") = %q, %v; want the zero Cursor`, z, err)
	}
}

func TestParseCursorRefusesWhatNoRecordHas(t *testing.T) {
	enc := func(scope, id string) string { return idem.Record{Scope: scope, ID: id}.Cursor().String() }
	for name, s := range map[string]string{
		"not base64":        "A!!",
		"padded":            enc("s", "id") + "=",
		"empty":             "AA",
		"other version":     "Ag" + enc("s", "id")[2:],
		"no id":             enc("s", ""),
		"no scope":          enc("", "id"),
		"scope too long":    enc(strings.Repeat("s", idem.MaxScopeLen+1), "id"),
		"stored id too big": enc("s", strings.Repeat("i", idem.MaxIDLen+1)),
		"invalid UTF-8":     enc("s", "\xff"),
		"NUL":               enc("s", "a\x00b"),
		"a plain id":        "order-1042",
		"huge":              strings.Repeat("A", 1<<20),
	} {
		if c, err := idem.ParseCursor(s); !errors.Is(err, idem.ErrInvalidCursor) {
			t.Errorf("%s: ParseCursor(%q) = %q, %v; want ErrInvalidCursor", name, s, c, err)
		}
	}
}

// A cursor holds the stored id: a page after a hashed id starts right
// after that record, never after the digest of its digest.
func TestListFilterAfterHashedID(t *testing.T) {
	long := idem.Record{Scope: "s", ID: idem.Key{Scope: "s", ID: strings.Repeat("x", 300)}.StoredID()}
	f := idem.ListFilter{After: long.Cursor()}
	if storekit.Match(f, long) {
		t.Fatal("the page after a record holds that record")
	}
	next := long
	next.ID += "0"
	if !storekit.Match(f, next) || !storekit.Match(f, idem.Record{Scope: "t", ID: "a"}) || storekit.Match(f, idem.Record{Scope: "s", ID: "sha256:0"}) {
		t.Fatal("the page after a hashed id is not the records after it in (scope, stored id) order")
	}
}

func FuzzCursor(f *testing.F) {
	f.Add("billing", "order-1")
	f.Add("s", "sha256:00")
	f.Fuzz(func(t *testing.T, scope, id string) {
		c := idem.Record{Scope: scope, ID: id}.Cursor()
		p, err := idem.ParseCursor(c.String())
		if err == nil && p != c {
			t.Fatalf("cursor (%q, %q) read back as (%q, %q)", scope, id, p.Scope(), p.StoredID())
		}
		valid := idem.Key{Scope: scope, ID: id}.Validate() == nil && len(id) <= idem.MaxIDLen
		if valid && err != nil {
			t.Fatalf("cursor of a storable record (%q, %q) refused: %v", scope, id, err)
		}
	})
}
