package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// EntityInbox is an entity-mode inbox (package entity: the key is in the
// business row, whose unique constraint is the dedup) that the console
// shows on its Entities page: the recent keys with their row's id and
// version, and the scope's conflicts and stale versions from the Recorder
// and Prometheus. EntitySQL reads one from a table.
type EntityInbox interface {
	// EntityScope is the scope the inbox's guard runs under (entity.Table's
	// Scope), which its conflicts and superseded versions are counted by.
	EntityScope() string
	// RecentEntities returns up to limit rows, newest first.
	RecentEntities(ctx context.Context, limit int) ([]EntityRow, error)
}

// EntityRow is one business row of an entity inbox. Its values come from
// producers and are shown as text.
type EntityRow struct {
	Key         string // the idempotency key (entity.Table's KeyColumn)
	ID          string // the business row's id; the key when they are one column
	Version     string // the version column (entity.Versioned), "" without one
	Fingerprint string // "" when the table keeps none
	Order       string // the value it is ordered by (a creation time, a serial)
}

// EntitySQL is an EntityInbox over a business table in a database/sql
// database: the columns of its entity.Table (and entity.Versioned), and
// the one it is newest-first ordered by.
type EntitySQL struct {
	DB      *sql.DB
	Dialect string // "postgres", "sqlite" or "mysql": how identifiers are quoted
	Scope   string // entity.Table's Scope
	Table   string // entity.Table's Name
	// KeyColumn and FingerprintColumn are entity.Table's ("": no
	// fingerprint); IDColumn and VersionColumn entity.Versioned's ("": the
	// key is the id; no version).
	KeyColumn, FingerprintColumn, IDColumn, VersionColumn string
	// OrderColumn orders the rows newest first: a creation time or a
	// serial, indexed on a large table. Default the key column.
	OrderColumn string
}

// ErrEntityConfig is returned for an EntitySQL whose dialect or names are
// not usable.
var ErrEntityConfig = errors.New("console: bad EntitySQL")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// EntityScope implements EntityInbox.
func (e *EntitySQL) EntityScope() string { return e.Scope }

// query is the newest-first query, every name checked to be a plain
// identifier and quoted.
func (e *EntitySQL) query(limit int) (string, error) {
	q := func(name string) string { return `"` + name + `"` }
	switch e.Dialect {
	case "postgres", "sqlite":
	case "mysql":
		q = func(name string) string { return "`" + name + "`" }
	default:
		return "", fmt.Errorf("%w: Dialect %q: postgres, sqlite or mysql", ErrEntityConfig, e.Dialect)
	}
	col := func(name, dflt string) (string, error) {
		if name == "" {
			if dflt == "" {
				return "NULL", nil
			}
			name = dflt
		}
		if !identRE.MatchString(name) {
			return "", fmt.Errorf("%w: %q is not a plain identifier", ErrEntityConfig, name)
		}
		return q(name), nil
	}
	var cols [5]string
	for i, c := range []struct{ name, dflt string }{
		{e.KeyColumn, ""}, {e.IDColumn, e.KeyColumn}, {e.VersionColumn, ""}, {e.FingerprintColumn, ""}, {e.OrderColumn, e.KeyColumn},
	} {
		s, err := col(c.name, c.dflt)
		if err != nil {
			return "", err
		}
		cols[i] = s
	}
	table, err := col(e.Table, "")
	if err != nil || e.Table == "" || e.KeyColumn == "" {
		return "", fmt.Errorf("%w: a Table and a KeyColumn are needed (%v)", ErrEntityConfig, err)
	}
	return fmt.Sprintf("SELECT %s, %s, %s, %s, %s FROM %s ORDER BY %s DESC LIMIT %d",
		cols[0], cols[1], cols[2], cols[3], cols[4], table, cols[4], limit), nil
}

// RecentEntities implements EntityInbox.
func (e *EntitySQL) RecentEntities(ctx context.Context, limit int) ([]EntityRow, error) {
	query, err := e.query(limit)
	if err != nil {
		return nil, err
	}
	rows, err := e.DB.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []EntityRow
	for rows.Next() {
		var v [5]any
		if err := rows.Scan(&v[0], &v[1], &v[2], &v[3], &v[4]); err != nil {
			return nil, err
		}
		out = append(out, EntityRow{Key: text(v[0]), ID: text(v[1]), Version: text(v[2]), Fingerprint: text(v[3]), Order: text(v[4])})
	}
	return out, rows.Err()
}

// text shows a scanned column value: bytes and strings as they are, times
// in UTC, numbers in decimal, NULL as "".
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case []byte:
		return string(x)
	case string:
		return x
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05.000 UTC")
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(v)
}

// entitiesData is the Entities page: per inbox, its recent rows and its
// scope's conflicts and stale versions.
type entitiesData struct {
	Inboxes []entityView
}

type entityView struct {
	Scope     string
	Rows      []EntityRow
	Err       string
	Conflicts []Conflict // the Recorder's, of this scope
	Recorder  bool
	// Counted over the Recorder's last hour, and Prometheus's window.
	RecConflicts, RecSuperseded   int64
	Prom                          bool
	PromConflicts, PromSuperseded int64
}

func (c *Console) entities(w http.ResponseWriter, r *http.Request) {
	if len(c.opts.Entities) == 0 {
		c.render(w, r, http.StatusNotFound, "message.html", &page{Title: "Entities",
			Message: "No entity inbox: the server that mounts the console passes no Options.Entities."})
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	var fl *fleetData
	if c.fleet.prom != nil {
		fl = c.fleet.get(ctx)
	}
	d := &entitiesData{}
	for _, in := range c.opts.Entities {
		v := entityView{Scope: in.EntityScope()}
		rows, err := in.RecentEntities(ctx, c.opts.PageSize)
		if err != nil {
			v.Err = err.Error()
		}
		v.Rows = rows
		if rec := c.opts.Recorder; rec != nil {
			v.Recorder = true
			for _, cf := range rec.Conflicts() {
				if cf.Key.Scope == v.Scope {
					v.Conflicts = append(v.Conflicts, cf)
				}
			}
			for _, s := range rec.Series() {
				if s.Scope == v.Scope {
					v.RecConflicts, v.RecSuperseded = s.Total.Conflicts, s.Total.Superseded
				}
			}
		}
		if fl != nil && fl.PromErr == "" {
			v.Prom = true
			for _, s := range fl.Scopes {
				if s.Scope == v.Scope && s.Prom != nil {
					v.PromConflicts, v.PromSuperseded = promTotal(s.Prom, "conflicts"), promTotal(s.Prom, "stale superseded versions")
				}
			}
		}
		d.Inboxes = append(d.Inboxes, v)
	}
	c.render(w, r, http.StatusOK, "entities.html", &page{Title: "Entities", Nav: "entities", Data: d})
}

func promTotal(ch *fleetChart, name string) int64 {
	for i, n := range ch.Names {
		if n == name {
			return ch.Totals[i]
		}
	}
	return 0
}
