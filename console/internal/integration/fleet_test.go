package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
)

// work runs n messages of scope through a guard of its own on st, as a
// consumer in another process would: the console is not its observer.
// Every third message is delivered twice.
func work(t testing.TB, st idem.Store, scope string, n int) {
	t.Helper()
	g, err := idem.New(st, idem.Options{Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		msg := idem.Message{ID: fmt.Sprintf("%s-msg-%d", scope, i), Payload: []byte("x")}
		for range 1 + btoi(i%3 == 0) {
			if _, err := g.Do(context.Background(), msg, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

var totalsRE = regexp.MustCompile(`(?s)<section class="scope-charts fleet" data-scope="([^"]*)".*?</section>`)

// fleetTotals reads the fleet section of an overview: per scope, the
// totals of each chart's series in order.
func fleetTotals(t *testing.T, body string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range totalsRE.FindAllStringSubmatch(body, -1) {
		for _, td := range regexp.MustCompile(`<td data-total>(\d+)</td>`).FindAllStringSubmatch(m[0], -1) {
			out[m[1]] = append(out[m[1]], td[1])
		}
	}
	return out
}

// TestFleetFromTheStore: the work of guards the console does not observe
// shows in its charts, counted by the store.
func TestFleetFromTheStore(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			st := s.open(t)
			work(t, st, "billing", 7)
			work(t, st, "mailer", 2)
			c := console.New(st, console.Options{Logger: quiet, CountsMaxAge: -1})
			t.Cleanup(func() { c.Close() })
			code, body := get(t, http.DefaultClient, serve(t, c)+"/")
			if code != http.StatusOK {
				t.Fatalf("overview: %d %s", code, body)
			}
			got := fleetTotals(t, body)
			// completed, claimed, released, retried: duplicates change no record.
			want := map[string][]string{"billing": {"7", "7", "0", "0"}, "mailer": {"2", "2", "0", "0"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("fleet totals %v, want %v", got, want)
			}
		})
	}
}

// fakeProm speaks Prometheus's query_range API: for each query it answers
// the matrix its answer function gives, and records the queries asked.
type fakeProm struct {
	mu      sync.Mutex
	queries []string
	answer  func(query string, start, step float64) (status int, body any)
}

func (p *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query_range" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	start, err1 := strconv.ParseFloat(r.Form.Get("start"), 64)
	step, err2 := strconv.ParseFloat(r.Form.Get("step"), 64)
	if q == "" || err1 != nil || err2 != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "bad_data", "error": "bad query"})
		return
	}
	p.mu.Lock()
	p.queries = append(p.queries, q)
	p.mu.Unlock()
	status, body := p.answer(q, start, step)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// matrix is a query_range answer: per scope label, the values at the
// window's first buckets.
func matrix(start, step float64, byScope map[string][]float64) map[string]any {
	var result []map[string]any
	for scope, vals := range byScope {
		var pts [][]any
		for i, v := range vals {
			pts = append(pts, []any{start + float64(i)*step, strconv.FormatFloat(v, 'f', -1, 64)})
		}
		result = append(result, map[string]any{"metric": map[string]string{"idem_scope": scope}, "values": pts})
	}
	return map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": result}}
}

const hostileScope = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`

// promAnswer gives every outcome query of scope billing counts of 1, 2
// and 3 in the window's first buckets (6 in all, 12 for dead letters,
// which sum four outcomes), the stale gauge 4 in each, and a scope with a
// hostile name one processed message.
func promAnswer(query string, start, step float64) (int, any) {
	switch {
	case strings.Contains(query, "idem_records_stale"):
		return http.StatusOK, matrix(start, step, map[string][]float64{"billing": {4, 4}})
	case strings.Contains(query, `"processed|reconciled"`):
		return http.StatusOK, matrix(start, step, map[string][]float64{"billing": {1, 2, 3}, hostileScope: {1}})
	case strings.Contains(query, "conflict|stale|permanent|no_key"):
		return http.StatusOK, matrix(start, step, map[string][]float64{"billing": {4, 4, 4}})
	}
	return http.StatusOK, matrix(start, step, map[string][]float64{"billing": {1, 2, 3}})
}

func TestFleetFromPrometheus(t *testing.T) {
	prom := &fakeProm{answer: promAnswer}
	psrv := httptest.NewServer(prom)
	t.Cleanup(psrv.Close)
	st := stores[0].open(t)
	c := console.New(st, console.Options{Logger: quiet, CountsMaxAge: -1, Prometheus: psrv.URL + "/"})
	t.Cleanup(func() { c.Close() })
	code, body := get(t, http.DefaultClient, serve(t, c)+"/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d %s", code, body)
	}
	got := fleetTotals(t, body)
	// processed, duplicates, conflicts, dead letters, held, superseded, stale (a gauge: its most)
	if want := []string{"6", "6", "6", "12", "6", "6", "4"}; fmt.Sprint(got["billing"]) != fmt.Sprint(want) {
		t.Errorf("billing's Prometheus totals %v, want %v\n%v", got["billing"], want, got)
	}
	if strings.Contains(body, hostileScope) || !strings.Contains(body, "&lt;script&gt;window.__pwned=1&lt;/script&gt;") {
		t.Errorf("a scope label from Prometheus is not escaped")
	}
	prom.mu.Lock()
	qs := strings.Join(prom.queries, "\n")
	prom.mu.Unlock()
	for _, want := range []string{`increase(idem_messages_total{idem_outcome="duplicate"}[60s])`, `max by (idem_scope) (idem_records_stale)`} {
		if !strings.Contains(qs, want) {
			t.Errorf("no query %s among\n%s", want, qs)
		}
	}

	// An error answer is shown, and the page still serves the store.
	prom.answer = func(string, float64, float64) (int, any) {
		return http.StatusUnprocessableEntity, map[string]string{"status": "error", "errorType": "execution", "error": "query timed out <b>x</b>"}
	}
	c2 := console.New(st, console.Options{Logger: quiet, CountsMaxAge: -1, Prometheus: psrv.URL})
	t.Cleanup(func() { c2.Close() })
	code, body = get(t, http.DefaultClient, serve(t, c2)+"/")
	if code != http.StatusOK || !strings.Contains(body, "reading Prometheus failed") || !strings.Contains(body, "query timed out &lt;b&gt;x&lt;/b&gt;") {
		t.Errorf("a Prometheus error: %d, the page does not say so escaped:\n%.3000s", code, body)
	}
	// Not a URL: said on the page.
	c3 := console.New(st, console.Options{Logger: quiet, CountsMaxAge: -1, Prometheus: "prometheus:9090"})
	t.Cleanup(func() { c3.Close() })
	if _, body := get(t, http.DefaultClient, serve(t, c3)+"/"); !strings.Contains(body, "not an http(s) URL") {
		t.Errorf("a Prometheus option that is no URL is not reported")
	}
}

// TestBrowserFleetShowsOtherGuards: a browser on a console that observes
// nothing itself sees the work of another guard on the same store, and of
// the fleet through Prometheus, in its charts.
func TestBrowserFleetShowsOtherGuards(t *testing.T) {
	ctx := browser(t)
	prom := &fakeProm{answer: promAnswer}
	psrv := httptest.NewServer(prom)
	t.Cleanup(psrv.Close)
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			st := s.open(t)
			c := console.New(st, console.Options{Logger: slog.New(slog.DiscardHandler), CountsMaxAge: -1, Prometheus: psrv.URL})
			t.Cleanup(func() { c.Close() })
			base := serve(t, c)
			work(t, st, "billing", 5)
			type scopeTotals struct {
				Scope  string  `json:"scope"`
				Totals []int64 `json:"totals"`
				Lines  int     `json:"lines"`
			}
			do(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#fleet-h`)))
			got := eval[[]scopeTotals](t, ctx, `Array.from(document.querySelectorAll('section.fleet')).map(s => ({
				scope: s.dataset.scope,
				totals: Array.from(s.querySelectorAll('td[data-total]')).map(td => parseInt(td.textContent, 10)),
				lines: s.querySelectorAll('svg polyline').length}))`)
			var billing *scopeTotals
			for i := range got {
				if got[i].Scope == "billing" {
					billing = &got[i]
				}
			}
			// The store's four series (5 completed, 5 claimed), then Prometheus's seven.
			if billing == nil || len(billing.Totals) != 11 || billing.Totals[0] != 5 || billing.Totals[1] != 5 || billing.Totals[4] != 6 || billing.Lines != 11 {
				t.Fatalf("the browser's fleet charts: %+v", got)
			}
			if p := eval[pwned](t, ctx, pwnedCheck); p.Flag != 0 || p.Elements != 0 {
				t.Fatalf("a scope name from Prometheus ran in the browser: %+v", p)
			}
		})
	}
}

// activityStore counts the Activity calls of the store it wraps.
type activityStore struct {
	console.Store
	mu sync.Mutex
	n  int
}

func (s *activityStore) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.(idem.ActivityCounter).Activity(ctx, q)
}

func (s *activityStore) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// TestFleetReadOncePerMaxAge: views within CountsMaxAge share one reading
// of the store's activity; a later view is served the old reading while a
// new one runs, which Close waits for.
func TestFleetReadOncePerMaxAge(t *testing.T) {
	st := &activityStore{Store: stores[0].open(t)}
	work(t, st, "billing", 3)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := console.New(st, console.Options{Logger: quiet, Clock: clock, CountsMaxAge: time.Hour})
	base := serve(t, c)
	for range 5 {
		if code, _ := get(t, http.DefaultClient, base+"/"); code != http.StatusOK {
			t.Fatalf("overview: %d", code)
		}
	}
	if n := st.calls(); n != 1 {
		t.Fatalf("five views within CountsMaxAge read the activity %d times, want 1", n)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if _, body := get(t, http.DefaultClient, base+"/"); !strings.Contains(body, `data-scope="billing"`) {
		t.Fatal("an old reading is not served while a new one runs")
	}
	c.Close() // waits for the refresh the view started
	if n := st.calls(); n != 2 {
		t.Fatalf("after the reading got old: %d readings, want 2", n)
	}
}
