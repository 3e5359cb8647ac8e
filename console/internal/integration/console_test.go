package integration_test

import (
	"context"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxmem "github.com/idemgo/idem/outbox/memory"
)

// fixture is a console over a seeded store behind an httptest server,
// mounted under /ops/idem/ as an application would.
type fixture struct {
	st   console.Store
	sd   seeded
	srv  *httptest.Server
	base string // the console's URL
	logs *testenv.SyncBuffer
	c    *console.Console
	ob   *outboxmem.Store
}

func operator(r *http.Request, a console.Action) (string, error) {
	if r.Header.Get("X-Deny") != "" {
		return "mallory", errors.New("mallory may not " + a.Op)
	}
	return "alice", nil
}

func newFixture(t testing.TB, st console.Store, authorize func(*http.Request, console.Action) (string, error), rec *console.Recorder) *fixture {
	return newFixtureWith(t, st, authorize, rec, true)
}

// newFixtureWith seeds st (with the hostile records or without them) and
// serves its console; more changes the console's options.
func newFixtureWith(t testing.TB, st console.Store, authorize func(*http.Request, console.Action) (string, error), rec *console.Recorder, hostile bool,
	more ...func(*console.Options)) *fixture {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	f := &fixture{st: st, sd: seedWith(t, st, now, hostile), logs: &testenv.SyncBuffer{}, ob: seedOutbox(t, now)}
	opts := console.Options{
		Authorize: authorize, Recorder: rec, Clock: func() time.Time { return now }, Outbox: f.ob,
		Logger: slog.New(slog.NewJSONHandler(f.logs, nil)), CountsMaxAge: -1, PageSize: 5,
	}
	for _, m := range more {
		m(&opts)
	}
	f.c = console.New(st, opts)
	t.Cleanup(func() { f.c.Close() })
	mux := http.NewServeMux()
	mux.Handle("/ops/idem/", f.c)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.base = f.srv.URL + "/ops/idem/"
	return f
}

// client is a browser-like client: cookies, no redirects followed.
func (f *fixture) client(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t testing.TB, c *http.Client, u string, form url.Values, header http.Header) (*http.Response, string) {
	t.Helper()
	return send(t, c, http.MethodPost, u, form, header)
}

// send sends one request, with the form as its body when given and the
// headers, and returns the response (its body read) and the body.
func send(t testing.TB, c *http.Client, method, u string, form url.Values, header http.Header) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func recordPage(f *fixture, k idem.Key) string {
	return f.base + "record?" + url.Values{"scope": {k.Scope}, "id": {k.ID}}.Encode()
}

func resolveForm(k idem.Key, op string, token int64, csrf string) url.Values {
	v := url.Values{"op": {op}, "scope": {k.Scope}, "id": {k.ID}, "token": {itoa(token)}, "confirm": {"on"}}
	if csrf != "" {
		v.Set("csrf", csrf)
	}
	return v
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func mustGet(t testing.TB, s console.Store, k idem.Key) idem.Record {
	t.Helper()
	r, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	return r
}

func TestPagesShowTheStore(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t, s.open(t), nil, nil)
			c := f.client(t)
			checkCounts(t, f, c)
			for _, p := range []string{"records", "records?scope=billing", "records?state=stale", "inprogress", "parked", "conflicts", "outbox", "outbox?state=pending",
				"records?scope=billing&after=" + idem.Record{Scope: "billing", ID: "order-004"}.Cursor().String()} {
				if code, body := get(t, c, f.base+p); code != http.StatusOK {
					t.Errorf("%s: %d\n%s", p, code, body)
				}
			}
			code, body := get(t, c, recordPage(f, f.sd.parked))
			if code != http.StatusOK || !strings.Contains(body, "order-stuck") || !strings.Contains(body, "stale: the lease ended") {
				t.Errorf("record page: %d\n%s", code, body)
			}
			if strings.Contains(body, `name="csrf"`) || strings.Contains(body, `action="resolve"`) {
				t.Error("a read-only console offers actions")
			}
			if code, _ := get(t, c, f.base+"record?scope=billing&id=nope"); code != http.StatusNotFound {
				t.Errorf("missing record: %d, want 404", code)
			}
			if code, _ := get(t, c, f.base+"records?state=bogus"); code != http.StatusBadRequest {
				t.Errorf("bad state: %d, want 400", code)
			}
			if code, _ := get(t, c, f.base+"nonsense"); code != http.StatusNotFound {
				t.Errorf("unknown page: %d, want 404", code)
			}
		})
	}
}

// TestPaging walks the records of a scope page by page and finds each once.
func TestPaging(t *testing.T) {
	f := newFixture(t, stores[0].open(t), nil, nil)
	c := f.client(t)
	next := f.base + "records?scope=billing"
	seen := map[string]int{}
	keyRE := regexp.MustCompile(`<td class="key"><a href="[^"]*">([^<]*)</a>`)
	nextRE := regexp.MustCompile(`<a rel="next" href="([^"]+)">`)
	for pages := 0; next != ""; pages++ {
		if pages > 10 {
			t.Fatal("more pages than records")
		}
		code, body := get(t, c, next)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", next, code)
		}
		for _, m := range keyRE.FindAllStringSubmatch(body, -1) {
			seen[html.UnescapeString(m[1])]++
		}
		next = ""
		if m := nextRE.FindStringSubmatch(body); m != nil {
			next = f.base + html.UnescapeString(m[1])
		}
	}
	recs, err := f.st.List(context.Background(), idem.ListFilter{Scope: "billing", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(recs) {
		t.Fatalf("pages showed %d keys, store has %d: %v", len(seen), len(recs), seen)
	}
	for _, r := range recs {
		if seen[r.ID] != 1 {
			t.Errorf("key %s shown %d times", r.ID, seen[r.ID])
		}
	}
}

func TestActionsNeedAuthorisationAndToken(t *testing.T) {
	ctx := context.Background()
	t.Run("read-only", func(t *testing.T) {
		f := newFixture(t, stores[0].open(t), nil, nil)
		c := f.client(t)
		before := mustGet(t, f.st, f.sd.parked)
		resp, body := post(t, c, f.base+"resolve", resolveForm(f.sd.parked, console.OpRelease, before.Token, "x"), nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Fatalf("resolve on a read-only console: %d\n%s", resp.StatusCode, body)
		}
		if resp, _ := post(t, c, f.base+"sweep", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("sweep on a read-only console: %d", resp.StatusCode)
		}
		if after := mustGet(t, f.st, f.sd.parked); after.State != idem.StateInProgress || after.Token != before.Token {
			t.Fatalf("record changed: %+v", after)
		}
		if !strings.Contains(f.logs.String(), "action refused") {
			t.Errorf("refusal not logged: %s", f.logs)
		}
	})
	t.Run("authorised", func(t *testing.T) {
		f := newFixture(t, stores[0].open(t), operator, nil)
		c := f.client(t)
		_, page := get(t, c, recordPage(f, f.sd.parked))
		m := csrfRE.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no CSRF token on the record page:\n%s", page)
		}
		token := html.UnescapeString(m[1])
		rec := mustGet(t, f.st, f.sd.parked)
		for _, tc := range []struct {
			name   string
			form   url.Values
			header http.Header
			client *http.Client
			want   int
		}{
			{"no token", resolveForm(f.sd.parked, console.OpComplete, rec.Token, ""), nil, c, http.StatusForbidden},
			{"wrong token", resolveForm(f.sd.parked, console.OpComplete, rec.Token, "AAAA"+token[4:]), nil, c, http.StatusForbidden},
			{"token of another browser", resolveForm(f.sd.parked, console.OpComplete, rec.Token, token), nil, f.client(t), http.StatusForbidden},
			{"cross-origin", resolveForm(f.sd.parked, console.OpComplete, rec.Token, token), http.Header{"Sec-Fetch-Site": {"cross-site"}}, c, http.StatusForbidden},
			{"other origin", resolveForm(f.sd.parked, console.OpComplete, rec.Token, token), http.Header{"Origin": {"http://evil.example"}}, c, http.StatusForbidden},
			{"hook refuses", resolveForm(f.sd.parked, console.OpComplete, rec.Token, token), http.Header{"X-Deny": {"1"}}, c, http.StatusForbidden},
			{"old fencing token", resolveForm(f.sd.parked, console.OpComplete, rec.Token-1, token), nil, c, http.StatusConflict},
			{"unknown op", resolveForm(f.sd.parked, "delete", rec.Token, token), nil, c, http.StatusBadRequest},
			{"completed record", resolveForm(idem.Key{Scope: "billing", ID: "order-001"}, console.OpRelease, 1, token), nil, c, http.StatusConflict},
		} {
			resp, body := post(t, tc.client, f.base+"resolve", tc.form, tc.header)
			if resp.StatusCode != tc.want {
				t.Errorf("%s: %d, want %d\n%s", tc.name, resp.StatusCode, tc.want, body)
			}
			if got := mustGet(t, f.st, f.sd.parked); got.State != idem.StateInProgress || got.Token != rec.Token {
				t.Fatalf("%s changed the record: %+v", tc.name, got)
			}
		}
		form := resolveForm(f.sd.parked, console.OpComplete, rec.Token, token)
		form.Set("result", `{"charge":"ch_manual"}`)
		resp, body := post(t, c, f.base+"resolve", form, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("resolve: %d\n%s", resp.StatusCode, body)
		}
		got := mustGet(t, f.st, f.sd.parked)
		if got.State != idem.StateCompleted || string(got.Result) != `{"charge":"ch_manual"}` || got.Token != rec.Token {
			t.Fatalf("after complete: %+v", got)
		}
		// The redirect's page says what was done, and a forged message is not shown.
		loc := resp.Header.Get("Location")
		_, page = get(t, c, f.srv.URL+loc)
		if !strings.Contains(page, "Record completed by alice") {
			t.Errorf("no confirmation on %s:\n%s", loc, page)
		}
		_, page = get(t, c, recordPage(f, f.sd.parked)+"&done=Record+completed+by+root")
		if strings.Contains(page, "by root") {
			t.Error("an unsigned flash message was shown")
		}
		logs := f.logs.String()
		if !strings.Contains(logs, `"msg":"idem console: record completed"`) || !strings.Contains(logs, `"who":"alice"`) || !strings.Contains(logs, `"key":"order-stuck"`) {
			t.Errorf("action not logged with who did it:\n%s", logs)
		}
		if !strings.Contains(logs, `"who":"mallory"`) {
			t.Errorf("refusal by the hook not logged with who asked:\n%s", logs)
		}
		// Sweep deletes the expired records, and only those.
		resp, _ = post(t, c, f.base+"sweep", url.Values{"csrf": {token}}, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sweep: %d", resp.StatusCode)
		}
		stats, _ := f.st.Stats(ctx, f.sd.now)
		for _, s := range stats {
			if s.Expired != 0 {
				t.Errorf("scope %s still has %d expired records", s.Scope, s.Expired)
			}
		}
		if !strings.Contains(f.logs.String(), `"deleted":2`) {
			t.Errorf("sweep not logged with its count:\n%s", f.logs)
		}
	})
}

func TestGetNeverChangesAnything(t *testing.T) {
	f := newFixture(t, stores[0].open(t), operator, nil)
	c := f.client(t)
	rec := mustGet(t, f.st, f.sd.parked)
	u := f.base + "resolve?" + resolveForm(f.sd.parked, console.OpComplete, rec.Token, "").Encode()
	if code, _ := get(t, c, u); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET resolve: %d, want 405", code)
	}
	if got := mustGet(t, f.st, f.sd.parked); got.State != idem.StateInProgress {
		t.Fatal("a GET changed the record")
	}
}

// TestUntrustedTextIsEscaped checks the HTML: every hostile value appears
// escaped and never as markup. The browser test checks that nothing runs.
func TestUntrustedTextIsEscaped(t *testing.T) {
	rec := console.NewRecorder(console.RecorderOptions{})
	f := newFixture(t, stores[0].open(t), operator, rec)
	rec.Observe(context.Background(), idem.Event{Key: f.sd.xss, Outcome: idem.OutcomeConflict,
		Err: &idem.ConflictError{Key: f.sd.xss, Fingerprint: `<b id="pwned">`, Record: idem.Record{Fingerprint: `"><i id="pwned">`}}})
	rec.Observe(context.Background(), idem.Event{Key: f.sd.xssOld, Outcome: idem.OutcomeStale})
	rec.DeadLetter(idem.Result{Key: f.sd.xss}, errors.New(`<script>window.__pwned=9</script>`), `<u id="pwned">`)
	c := f.client(t)
	for _, p := range []string{"", "records", "records?scope=" + url.QueryEscape(xssScope), "parked", "inprogress", "conflicts", "outbox", "outbox?state=pending",
		strings.TrimPrefix(recordPage(f, f.sd.xss), f.base), strings.TrimPrefix(recordPage(f, f.sd.xssOld), f.base),
		"records?scope=" + url.QueryEscape(xssKey), "record?scope=x&id=" + url.QueryEscape(xssKey)} {
		_, body := get(t, c, f.base+p)
		for _, bad := range []string{"<script>window", `id="pwned"`, "<img", "<svg id", "<iframe", `href="javascript:`, `onerror="`, `onload="`} {
			if strings.Contains(body, bad) {
				t.Errorf("%s: page contains %q unescaped", p, bad)
			}
		}
	}
}

func TestCountsSnapshot(t *testing.T) {
	st := &countingStore{Store: stores[0].open(t)}
	now := time.Now()
	seed(t, st, now)
	c := console.New(st, console.Options{Clock: func() time.Time { return now }, CountsMaxAge: time.Hour})
	defer c.Close()
	for range 5 {
		rr := httptest.NewRecorder()
		c.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "http://localhost/idem/", nil))
		if rr.Code != http.StatusOK {
			t.Fatalf("overview: %d", rr.Code)
		}
	}
	if n := st.stats(); n != 1 {
		t.Fatalf("five views within CountsMaxAge counted %d times, want 1", n)
	}
}

type countingStore struct {
	console.Store
	mu sync.Mutex
	n  int
}

func (s *countingStore) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.Stats(ctx, now)
}

func (s *countingStore) stats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func TestOutboxPage(t *testing.T) {
	f := newFixture(t, stores[0].open(t), operator, nil)
	c := f.client(t)
	code, body := get(t, c, f.base+"outbox")
	if code != http.StatusOK {
		t.Fatalf("outbox: %d\n%s", code, body)
	}
	for _, want := range []string{`data-count="pending">3<`, `data-count="parked"><strong class="bad">2<`, "no route to exchange mail", "the oldest pending message was committed 5m 0s ago"} {
		if !strings.Contains(body, want) {
			t.Errorf("outbox page lacks %q", want)
		}
	}
	if _, body := get(t, c, f.base); !strings.Contains(body, "3 pending") || !strings.Contains(body, "2 parked") {
		t.Errorf("overview lacks the outbox summary")
	}
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no retry form")
	}
	token := html.UnescapeString(m[1])
	parked, err := f.ob.List(context.Background(), outbox.ListFilter{State: outbox.StateParked})
	if err != nil || len(parked) != 2 {
		t.Fatalf("parked: %d %v", len(parked), err)
	}
	seq := strconv.FormatInt(parked[0].Seq, 10)
	if resp, _ := post(t, c, f.base+"outbox-retry", url.Values{"seq": {seq}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("retry without the token: %d, want 403", resp.StatusCode)
	}
	resp, _ := post(t, c, f.base+"outbox-retry", url.Values{"seq": {seq}, "csrf": {token}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d", resp.StatusCode)
	}
	st, _ := f.ob.Stats(context.Background(), f.sd.now)
	if st.Parked != 1 || st.Pending != 4 {
		t.Fatalf("after retrying one: %+v, want 1 parked, 4 pending", st)
	}
	if !strings.Contains(f.logs.String(), `"seqs":"`+seq+`"`) || !strings.Contains(f.logs.String(), `"msg":"idem console: outbox messages retried"`) {
		t.Errorf("retry not logged:\n%s", f.logs)
	}
}

// checkCounts compares the overview's counts with the store's.
func checkCounts(t *testing.T, f *fixture, c *http.Client) {
	t.Helper()
	code, body := get(t, c, f.base)
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	stats, err := f.st.Stats(context.Background(), f.sd.now)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		row := `<tr data-scope="` + html.EscapeString(st.Scope) + `">`
		i := strings.Index(body, row)
		if i < 0 {
			t.Fatalf("overview has no row for scope %q", st.Scope)
		}
		rowHTML := body[i : i+strings.Index(body[i:], "</tr>")]
		for state, n := range map[string]int64{"in_progress": st.InProgress, "stale": st.Stale, "completed": st.Completed, "released": st.Released, "expired": st.Expired} {
			re := regexp.MustCompile(`data-count="` + state + `">(?:<a[^>]*>)?(\d+)<`)
			m := re.FindStringSubmatch(rowHTML)
			if m == nil || m[1] != itoa(n) {
				t.Errorf("scope %q %s: page shows %v, store counts %d", st.Scope, state, m, n)
			}
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
