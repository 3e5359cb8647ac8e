package sqlite_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem/store/sqlite"
)

// TestQueryPlans checks that the sweep and the claim path use indexes, not
// table scans: the table is meant to hold 100M rows.
func TestQueryPlans(t *testing.T) {
	s := openStore(t, sqlite.Options{})
	table := sqlite.DefaultTable
	for _, c := range []struct{ query, want string }{
		{`SELECT rowid FROM ` + table + ` WHERE expires_at <> 0 AND expires_at <= 5 LIMIT 10`, "USING COVERING INDEX " + table + "_expires_at"},
		{`SELECT * FROM ` + table + ` WHERE scope = 'a' AND id = 'b'`, "USING INDEX sqlite_autoindex_" + table},
		{`SELECT * FROM ` + table + ` WHERE (scope, id) > ('a', 'b') ORDER BY scope, id LIMIT 10`, "USING INDEX sqlite_autoindex_" + table},
	} {
		rows, err := s.DB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+c.query)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, c.want) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("plan of %s:\n  %s\nwant %s", c.query, p, c.want)
		}
	}
}
