package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/storetest"
)

var nextCursorRE = regexp.MustCompile(`next page: --after (\S+)\n`)

// TestListPagesEveryID pages through records of every id shape (hashed
// ones, ids spelled like digests, ids over 1 KiB) three at a time with the
// cursor each page prints, as JSON and as text: `list --after <printed
// cursor>` continues exactly where the page stopped, every record once, in
// order.
func TestListPagesEveryID(t *testing.T) {
	for name, newDSN := range operatorStores {
		t.Run(name, func(t *testing.T) {
			d := newDSN(t)
			if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
				t.Fatalf("migrate: %d %s %s", code, out, errs)
			}
			ctx := context.Background()
			h, err := dsn.Open(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			now := time.Now()
			for _, k := range storetest.PagingKeys() {
				if _, err := h.Store.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now,
					LeaseUntil: now.Add(time.Hour), ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			all, err := h.Store.(idem.Inspector).List(ctx, idem.ListFilter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, r := range all {
				want = append(want, r.Scope+"/"+r.ID)
			}
			list := func(args ...string) string {
				t.Helper()
				code, out, errs := runCmd(t, append([]string{"list", "--limit", "3", "--store", d}, args...)...)
				if code != exitOK {
					t.Fatalf("idem list %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
				}
				return out
			}

			var got, jsonCursors []string
			var after []string
			for range len(want) + 2 {
				var page struct {
					Records []recordJSON `json:"records"`
					Next    *nextPage    `json:"next"`
				}
				if err := json.Unmarshal([]byte(list(append([]string{"--json"}, after...)...)), &page); err != nil {
					t.Fatal(err)
				}
				for _, r := range page.Records {
					got = append(got, r.Scope+"/"+r.ID)
				}
				if page.Next == nil {
					break
				}
				jsonCursors = append(jsonCursors, page.Next.After.String())
				after = []string{"--after", page.Next.After.String()}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("list --json --after <next.after> listed %d records, want the %d in the store once each, in order\n got %q\nwant %q",
					len(got), len(want), got, want)
			}

			var textCursors []string
			after = nil
			for range len(want) + 2 {
				m := nextCursorRE.FindStringSubmatch(list(after...))
				if m == nil {
					break
				}
				textCursors = append(textCursors, m[1])
				after = []string{"--after", m[1]}
			}
			if !slices.Equal(textCursors, jsonCursors) || len(textCursors) != len(want)/3 {
				t.Fatalf("text pages printed cursors %q, want the JSON pages' %q", textCursors, jsonCursors)
			}
		})
	}
}
