package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

var pageFiles = []string{"overview.html", "records.html", "record.html", "conflicts.html", "outbox.html", "entities.html", "deadletters.html", "deadletter.html", "replay.html", "message.html"}

func parsePages(funcs template.FuncMap) map[string]*template.Template {
	m := make(map[string]*template.Template, len(pageFiles))
	for _, f := range pageFiles {
		m[f] = template.Must(template.New(f).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+f))
	}
	return m
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"rel":       rel,
		"utc":       func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") },
		"iso":       func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"dur":       shortDur,
		"recordURL": recordURL,
		"listURL":   listURL,
		"preview":   preview,
		"hexdump":   hexdump,
		"isText":    func(b []byte) bool { return utf8.Valid(b) },
		"stale":     func(r idem.Record, now time.Time) bool { return r.LeaseExpired(now) },
		"expired":   func(r idem.Record, now time.Time) bool { return r.Expired(now) },
		"sub":       func(a, b time.Time) time.Duration { return a.Sub(b) },
		"hashedID":  func(r idem.Record) bool { return r.DisplayID != "" && r.DisplayID != r.ID },
		"reachable": reachable,
		"short":     func(s string, n int) string { return shorten(s, n) },
		"stateName": func(s idem.State) string { return strings.ReplaceAll(string(s), "_", " ") },
		"itoa":      func(n int64) string { return strconv.FormatInt(n, 10) },
		"dlURL":     deadLetterURL,
		"dlsURL":    deadLettersURL,
	}
}

// rel says how far t is from now in words: "3m 20s ago", "in 12s".
func rel(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	if d >= 0 {
		return shortDur(d) + " ago"
	}
	return "in " + shortDur(-d)
}

func shortDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// recordURL links a record's page. The id is the one Get finds the record
// by: the original id, kept whole up to idem.MaxDisplayLen bytes.
func recordURL(k idem.Key) string {
	return "record?" + url.Values{"scope": {k.Scope}, "id": {k.ID}}.Encode()
}

// reachable reports whether the record's page can find it again by its
// display id: not when the original id was longer than idem.MaxDisplayLen
// and only its first bytes were kept.
func reachable(r idem.Record) bool { return r.Key().StoredID() == r.ID }

// listURL links a page of a record list; after, when given, is the cursor
// it starts after (the previous page's last record, exactly: a Key would lose
// the stored id of a record whose original id was cut for display).
func listURL(view, scope, state string, after ...idem.Cursor) string {
	v := url.Values{}
	if scope != "" {
		v.Set("scope", scope)
	}
	if state != "" {
		v.Set("state", state)
	}
	if len(after) > 0 && !after[0].IsZero() {
		v.Set("after", after[0].String())
	}
	if len(v) == 0 {
		return view
	}
	return view + "?" + v.Encode()
}

const previewLen = 4096

// preview is the start of a result as text (the template escapes it).
func preview(b []byte) string {
	s := string(b)
	if len(s) > previewLen {
		return shorten(s, previewLen)
	}
	return s
}

// hexdump shows the start of a binary result.
func hexdump(b []byte) string {
	const n = 512
	var sb strings.Builder
	for i := 0; i < len(b) && i < n; i += 16 {
		fmt.Fprintf(&sb, "%04x  ", i)
		for j := i; j < i+16 && j < len(b) && j < n; j++ {
			fmt.Fprintf(&sb, "%02x ", b[j])
		}
		sb.WriteByte('\n')
	}
	if len(b) > n {
		fmt.Fprintf(&sb, "… %d more bytes\n", len(b)-n)
	}
	return sb.String()
}

// overviewData is the front page: counts by scope and state, charts.
type overviewData struct {
	Counts    snapshot
	Old       bool // older than CountsMaxAge: a recount is running
	Rows      []idem.ScopeStats
	Total     idem.ScopeStats
	Charts    []scopeCharts
	Fleet     *fleetData // nil: no fleet source
	Recorder  bool
	Conflicts int // recent, from the recorder
	Parked    int
	Outbox    *outbox.Stats // nil without Options.Outbox
	OutboxLag time.Duration
	OutboxErr string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	snap := c.counts.get(ctx)
	now := c.clock()
	d := &overviewData{Counts: snap, Rows: snap.Stats, Recorder: c.opts.Recorder != nil,
		Old: c.opts.CountsMaxAge >= 0 && now.Sub(snap.At) >= c.opts.CountsMaxAge}
	for _, s := range snap.Stats {
		d.Total.InProgress += s.InProgress
		d.Total.Completed += s.Completed
		d.Total.Released += s.Released
		d.Total.Stale += s.Stale
		d.Total.Expired += s.Expired
		if !s.OldestInProgress.IsZero() && (d.Total.OldestInProgress.IsZero() || s.OldestInProgress.Before(d.Total.OldestInProgress)) {
			d.Total.OldestInProgress = s.OldestInProgress
		}
	}
	if c.fleet.enabled() {
		d.Fleet = c.fleet.get(ctx)
	}
	if rec := c.opts.Recorder; rec != nil {
		for _, s := range rec.Series() {
			d.Charts = append(d.Charts, chartsFor(s))
		}
		d.Conflicts, d.Parked = len(rec.Conflicts()), len(rec.ParkedKeys())
	}
	if ob := c.opts.Outbox; ob != nil {
		if st, err := ob.Stats(ctx, now); err != nil {
			d.OutboxErr = err.Error()
		} else {
			d.Outbox, d.OutboxLag = &st, st.Lag(now)
		}
	}
	p := &page{Title: "Overview", Nav: "overview", Now: now, Data: d, offers: []Action{{Op: OpSweep}}}
	if snap.Err != nil {
		p.Error = "counting the records failed: " + snap.Err.Error()
	}
	c.render(w, r, http.StatusOK, "overview.html", p)
}

// listData is a page of records.
type listData struct {
	View  string // records, inprogress, parked
	Scope string
	State string // a state, "stale", or ""
	// StateParam is the state in the page's links: "" on the views that
	// imply one.
	StateParam string
	Records    []idem.Record
	Next       idem.Cursor // zero on the last page
	First      bool        // no After: the first page
	Parked     map[idem.Key]time.Time
	Lease      bool // show lease columns
}

// ParkedAt is when the recorder saw the key parked; zero when it did not.
func (d *listData) ParkedAt(k idem.Key) *time.Time {
	if at, ok := d.Parked[k]; ok {
		return &at
	}
	return nil
}

var listStates = map[string]bool{"": true, "in_progress": true, "completed": true, "released": true, "stale": true}

func (c *Console) records(w http.ResponseWriter, r *http.Request) {
	c.list(w, r, "records", "Records", r.URL.Query().Get("state"))
}

func (c *Console) inProgress(w http.ResponseWriter, r *http.Request) {
	c.list(w, r, "inprogress", "In progress", "in_progress")
}

func (c *Console) parked(w http.ResponseWriter, r *http.Request) {
	c.list(w, r, "parked", "Stale and parked", "stale")
}

func (c *Console) list(w http.ResponseWriter, r *http.Request, view, title, state string) {
	q := r.URL.Query()
	if !listStates[state] {
		c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: title,
			Error: "unknown state " + state + ": use in_progress, completed, released or stale"})
		return
	}
	now := c.clock()
	f := idem.ListFilter{Scope: q.Get("scope"), Limit: c.opts.PageSize + 1}
	switch state {
	case "stale":
		f.StaleAt = now
	case "":
	default:
		f.State = idem.State(state)
	}
	after, err := idem.ParseCursor(q.Get("after"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: title,
			Error: "not a page cursor: follow the list's Next page link"})
		return
	}
	f.After = after
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	recs, err := c.st.List(ctx, f)
	if err != nil {
		c.storeError(w, r, "listing the records failed", err)
		return
	}
	d := &listData{View: view, Scope: f.Scope, State: state, First: f.After.IsZero(),
		Lease: state == "in_progress" || state == "stale"}
	if view == "records" {
		d.StateParam = state
	}
	if len(recs) > c.opts.PageSize {
		recs = recs[:c.opts.PageSize]
		d.Next = recs[len(recs)-1].Cursor()
	}
	d.Records = recs
	if rec := c.opts.Recorder; rec != nil && d.Lease {
		d.Parked = map[idem.Key]time.Time{}
		for _, p := range rec.ParkedKeys() {
			if _, ok := d.Parked[p.Key]; !ok {
				d.Parked[p.Key] = p.At
			}
		}
	}
	c.render(w, r, http.StatusOK, "records.html", &page{Title: title, Nav: view, Now: now, Data: d})
}

// recordData is one record's page.
type recordData struct {
	Record     idem.Record
	Key        idem.Key
	Stale      bool
	Live       bool // in progress with a live lease
	Resolvable bool
	Parked     time.Time
}

func (c *Console) record(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := idem.Key{Scope: q.Get("scope"), ID: q.Get("id")}
	if err := key.Validate(); err != nil {
		c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: "Record", Error: "no such key: " + err.Error()})
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	rec, err := c.st.Get(ctx, key)
	if errors.Is(err, idem.ErrNotFound) {
		c.render(w, r, http.StatusNotFound, "message.html", &page{Title: "Record",
			Message: fmt.Sprintf("No record for key %q in scope %q (never claimed, or swept after its retention).", key.ID, key.Scope)})
		return
	}
	if err != nil {
		c.storeError(w, r, "reading the record failed", err)
		return
	}
	now := c.clock()
	d := &recordData{Record: rec, Key: key, Stale: rec.LeaseExpired(now),
		Live: rec.State == idem.StateInProgress && !rec.LeaseExpired(now), Resolvable: rec.State == idem.StateInProgress}
	if c.opts.Recorder != nil {
		for _, p := range c.opts.Recorder.ParkedKeys() {
			if p.Key == key {
				d.Parked = p.At
				break
			}
		}
	}
	p := &page{Title: "Record", Nav: "records", Now: now, Data: d}
	if d.Resolvable {
		p.offers = []Action{{Op: OpComplete, Key: key}, {Op: OpRelease, Key: key}}
	}
	c.render(w, r, http.StatusOK, "record.html", p)
}
