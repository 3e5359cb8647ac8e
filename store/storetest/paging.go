package storetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

// PagingKeys are keys of every shape an id takes, in two scopes, one a
// prefix of the other: plain ids, ids that sort right around each other,
// ids spelled like stored digests ("sha256:..."), ids over MaxIDLen and over
// MaxDisplayLen (two that share their first MaxDisplayLen bytes, so their
// display ids are equal), and binary-looking text. Paging through them with
// a Cursor must visit each record once, in order; the tests of the
// Inspector's callers (the idem command, the console) page through them too.
func PagingKeys() []idem.Key {
	long := strings.Repeat("L", idem.MaxDisplayLen)
	ids := []string{
		"a", "a ", "a  ", "a\x01", "A", "a-", "b", "order-1", "order-10", "order-2",
		"sha256:", "sha256:0", "sha255", "sha256;",
		"sha256:" + strings.Repeat("0", 64),                           // the spelling of a digest
		idem.Key{ID: strings.Repeat("f", idem.MaxIDLen+1)}.StoredID(), // the stored id of the "f" id below
		strings.Repeat("e", idem.MaxIDLen),                            // stored as it is
		strings.Repeat("f", idem.MaxIDLen+1),                          // hashed
		long + "-1", long + "-2",                                      // hashed, one display id
		"x" + strings.Repeat("é", idem.MaxDisplayLen/2), // a display cut inside a rune
		"\x01\x02\x03", "\x7f", "\t\n\rx", "\u0080\u00ff", "\U0010FFFF", "\ufffd", `\x00`, "%00",
	}
	var keys []idem.Key
	for _, scope := range []string{"pg", "pg-b"} {
		for _, id := range ids {
			keys = append(keys, idem.Key{Scope: scope, ID: id})
		}
	}
	// "pg" + "-b" spells the other scope: a store that orders scope and id
	// run together would place this record among pg-b's.
	return append(keys, idem.Key{Scope: "pg", ID: "-b"})
}

// testPaging pages through PagingKeys' records 1 and 3 at a time, over the
// whole store and within a scope, passing each cursor through its text
// form: every record comes exactly once, in (scope, stored id) byte order.
// A cursor holds the stored id itself, so hashed ids are never hashed again.
func testPaging(t *testing.T, s idem.Store) {
	in, ok := s.(idem.Inspector)
	if !ok {
		t.Skip("the store is not an idem.Inspector")
	}
	var want []string
	for i, k := range PagingKeys() {
		c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
		if i%2 == 0 {
			mustComplete(t, s, k, c.Record.Token, nil, T0)
		}
		want = append(want, k.Scope+"\x00"+k.StoredID())
	}
	slices.SortFunc(want, func(a, b string) int {
		as, ai, _ := strings.Cut(a, "\x00")
		bs, bi, _ := strings.Cut(b, "\x00")
		return cmp.Or(strings.Compare(as, bs), strings.Compare(ai, bi))
	})
	inScope := func(scope string) []string {
		var out []string
		for _, w := range want {
			if strings.HasPrefix(w, scope+"\x00") {
				out = append(out, w)
			}
		}
		return out
	}
	list := func(f idem.ListFilter) []idem.Record {
		t.Helper()
		recs, err := in.List(context.Background(), f)
		if err != nil {
			t.Fatalf("List(scope %q, after %q, limit %d): %v", f.Scope, f.After, f.Limit, err)
		}
		return recs
	}
	for _, tc := range []struct {
		scope string
		limit int
		want  []string
	}{
		{"", len(want) + 1, want},
		{"", 3, want},
		{"", 1, want},
		{"pg", 3, inScope("pg")},
		{"pg-b", 3, inScope("pg-b")},
	} {
		var got []string
		var after idem.Cursor
		for range len(tc.want) + 2 {
			page := list(idem.ListFilter{Scope: tc.scope, After: after, Limit: tc.limit})
			for _, r := range page {
				got = append(got, r.Scope+"\x00"+r.ID)
			}
			if len(page) < tc.limit {
				break
			}
			after = roundTrip(t, page[len(page)-1].Cursor())
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("paging scope %q by %d: %d records, want %d, each once in order; %s",
				tc.scope, tc.limit, len(got), len(tc.want), diff(got, tc.want))
		}
	}
	// A cursor from another scope: the scope's page starts at its first
	// record when the cursor lies before it, and is empty after it.
	a, b := inScope("pg"), inScope("pg-b")
	last := func(w string) idem.Cursor {
		scope, id, _ := strings.Cut(w, "\x00")
		return idem.Record{Scope: scope, ID: id}.Cursor()
	}
	if got := list(idem.ListFilter{Scope: "pg-b", After: last(a[len(a)-1]), Limit: 2}); len(got) != 2 || got[0].Scope+"\x00"+got[0].ID != b[0] {
		t.Fatalf("scope pg-b after pg's last record = %d records, want pg-b's first two", len(got))
	}
	if got := list(idem.ListFilter{Scope: "pg", After: last(b[0]), Limit: 2}); len(got) != 0 {
		t.Fatalf("scope pg after a pg-b record = %d records, want none", len(got))
	}
}

// roundTrip passes c through its text form, as the idem command and the
// console do, and fails unless it comes back exactly.
func roundTrip(t *testing.T, c idem.Cursor) idem.Cursor {
	t.Helper()
	p, err := idem.ParseCursor(c.String())
	if err != nil || p != c || p.String() != c.String() {
		t.Fatalf("cursor %q (%q, %.40q) read back as %q, %v", c, c.Scope(), c.StoredID(), p, err)
	}
	return p
}

// diff says which records a paging missed, repeated or misplaced.
func diff(got, want []string) string {
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
	}
	var missing, repeated []string
	for _, w := range want {
		switch n := seen[w]; {
		case n == 0:
			missing = append(missing, w)
		case n > 1:
			repeated = append(repeated, w)
		}
	}
	at := 0
	for at < min(len(got), len(want)) && got[at] == want[at] {
		at++
	}
	return fmt.Sprintf("first difference at %d; missing %d: %s; repeated %d: %s",
		at, len(missing), show(missing), len(repeated), show(repeated))
}

// show renders scope/id pairs for a failure, long ids shortened.
func show(ws []string) string {
	out := make([]string, len(ws))
	for i, w := range ws {
		scope, id, _ := strings.Cut(w, "\x00")
		if len(id) > 24 {
			id = id[:20] + fmt.Sprintf("…(%d)", len(id))
		}
		out[i] = fmt.Sprintf("%s/%q", scope, id)
	}
	return strings.Join(out, " ")
}
