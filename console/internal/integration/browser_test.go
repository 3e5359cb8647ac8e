package integration_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/internal/testenv"
)

// The pictures of docs/operations.md are the console module's: console/testdata.
var updateScreenshot = flag.Bool("update-screenshot", false, "write the screenshots of the overview and a record to console/testdata/ (docs/operations.md's pictures)")

// browser starts Debian's chromium, headless, with a fresh profile and
// nothing that reaches the network on its own. Without chromium the test is
// skipped, or fails under IDEM_REQUIRE_SERVICES=1 (CI installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		msg := "chromium is not installed (apt-get install -y chromium)"
		if testenv.Required() {
			t.Fatal(msg + " [IDEM_REQUIRE_SERVICES=1]")
		}
		t.Skip(msg)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	// A bound so that a browser that hangs fails the test instead of the
	// whole run; no assertion depends on it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// do runs browser steps, failing the test at the first error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluate %.60s: %v", expr, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return v
}

// countRow is a row of the overview's counts table as the browser shows it.
type countRow struct {
	Scope  string           `json:"scope"`
	Counts map[string]int64 `json:"counts"`
}

const readCounts = `Array.from(document.querySelectorAll('table.counts tbody tr[data-scope]')).map(tr => ({
	scope: tr.dataset.scope,
	counts: Object.fromEntries(Array.from(tr.querySelectorAll('td[data-count]')).map(td => [td.dataset.count, parseInt(td.textContent, 10)]))
}))`

// pwnedCheck finds what a hostile value would leave if it were interpreted:
// a flag its script sets, or an element it would add.
const pwnedCheck = `({flag: window.__pwned === undefined ? 0 : window.__pwned, elements: document.querySelectorAll('#pwned, body script:not([src]), iframe').length})`

type pwned struct {
	Flag     int `json:"flag"`
	Elements int `json:"elements"`
}

func TestBrowserCountsMatchTheStore(t *testing.T) {
	ctx := browser(t)
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t, s.open(t), nil, nil)
			do(t, ctx, chromedp.Navigate(f.base))
			rows := eval[[]countRow](t, ctx, readCounts)
			stats, err := f.st.Stats(context.Background(), f.sd.now)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(stats) || len(stats) != 3 {
				t.Fatalf("the page shows %d scopes, the store counts %d (want 3): %+v", len(rows), len(stats), rows)
			}
			byScope := map[string]countRow{}
			for _, r := range rows {
				byScope[r.Scope] = r
			}
			for _, st := range stats {
				got, ok := byScope[st.Scope]
				if !ok {
					t.Fatalf("no row for scope %q", st.Scope)
				}
				want := map[string]int64{"in_progress": st.InProgress, "stale": st.Stale, "completed": st.Completed, "released": st.Released, "expired": st.Expired}
				for k, v := range want {
					if got.Counts[k] != v {
						t.Errorf("scope %q %s: page %d, store %d", st.Scope, k, got.Counts[k], v)
					}
				}
			}
			// Every state is there to be seen: the seed has each.
			b := byScope["billing"].Counts
			if b["in_progress"] != 2 || b["stale"] != 1 || b["released"] != 1 || b["completed"] != 12 || byScope["mailer"].Counts["expired"] != 2 {
				t.Errorf("seeded counts not shown: %+v", byScope)
			}
		})
	}
}

func TestBrowserResolveParkedRecord(t *testing.T) {
	ctx := browser(t)
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t, s.open(t), operator, nil)
			before := mustGet(t, f.st, f.sd.parked)
			do(t, ctx,
				chromedp.Navigate(f.base+"parked"),
				// The operator finds the stuck record on the parked page and opens it.
				chromedp.Click(chromedp.Search(`//td[@class="key"]/a[text()="order-stuck"]`)),
				chromedp.WaitVisible(chromedp.ID("release")),
				chromedp.Click(chromedp.ID("confirm-release")),
				chromedp.Click(chromedp.ID("release")),
				chromedp.WaitVisible(chromedp.CSS("p.flash")),
			)
			flash := text(t, ctx, "p.flash")
			if !strings.Contains(flash, "released by alice") {
				t.Errorf("flash %q", flash)
			}
			after := mustGet(t, f.st, f.sd.parked)
			if after.State != idem.StateReleased || after.Token != before.Token {
				t.Fatalf("after release through the page: %+v, want released with token %d", after, before.Token)
			}
			// The page shows the store's new state.
			state := text(t, ctx, "#rec-state")
			if !strings.HasPrefix(state, "released") {
				t.Errorf("record page shows %q after the release", state)
			}
			if !strings.Contains(f.logs.String(), `"who":"alice"`) {
				t.Errorf("the action was not logged with who did it: %s", f.logs)
			}

			// Completing the live record with a result, through the page.
			live := mustGet(t, f.st, f.sd.live)
			do(t, ctx,
				chromedp.Navigate(recordPage(f, f.sd.live)),
				chromedp.SendKeys(chromedp.ID("result"), `{"charge":"ch_by_hand"}`),
				chromedp.Click(chromedp.ID("confirm-complete")),
				chromedp.Click(chromedp.ID("complete")),
				chromedp.WaitVisible(chromedp.CSS("p.flash")),
			)
			done := mustGet(t, f.st, f.sd.live)
			if done.State != idem.StateCompleted || string(done.Result) != `{"charge":"ch_by_hand"}` || done.Token != live.Token {
				t.Fatalf("after complete through the page: %+v", done)
			}
		})
	}
}

func TestBrowserOutboxRetry(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, stores[0].open(t), operator, nil)
	do(t, ctx,
		chromedp.Navigate(f.base),
		chromedp.Click(chromedp.Search(`//p[@id="outbox-summary"]/a[contains(., "parked")]`)),
		chromedp.WaitVisible(chromedp.Search(`//button[text()="Retry every parked message"]`)),
	)
	errs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('table.outbox tbody tr td:nth-child(7)')).map(td => td.textContent)`)
	if len(errs) != 2 || !slices.Contains(errs, `rejected: <b id="pwned" onclick="window.__pwned=12">`) {
		t.Errorf("parked messages' errors shown as %q", errs)
	}
	do(t, ctx,
		chromedp.Click(chromedp.Search(`//button[text()="Retry every parked message"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.flash")),
	)
	if flash := text(t, ctx, "p.flash"); !strings.Contains(flash, "2 parked messages made pending again by alice") {
		t.Errorf("flash %q", flash)
	}
	st, err := f.ob.Stats(context.Background(), f.sd.now)
	if err != nil || st.Parked != 0 || st.Pending != 5 {
		t.Fatalf("after retrying through the page: %+v %v, want 0 parked, 5 pending", st, err)
	}
}

// fetchPost posts a form from inside the page (same origin, with the
// browser's cookies) and returns the status.
func fetchPost(action string, fields map[string]string) string {
	var b strings.Builder
	for k, v := range fields {
		fmt.Fprintf(&b, "f.append(%q, %q);", k, v)
	}
	return `(async () => { const f = new URLSearchParams(); ` + b.String() +
		` const r = await fetch(` + fmt.Sprintf("%q", action) + `, {method: 'POST', body: f, redirect: 'manual'}); return r.status; })()`
}

func TestBrowserRefusesWithoutAuthorisationOrToken(t *testing.T) {
	ctx := browser(t)
	t.Run("read-only", func(t *testing.T) {
		f := newFixture(t, stores[1].open(t), nil, nil)
		before := mustGet(t, f.st, f.sd.parked)
		do(t, ctx, chromedp.Navigate(recordPage(f, f.sd.parked)))
		forms := eval[int](t, ctx, `document.querySelectorAll('form[action="resolve"], form[action="sweep"], button').length`)
		status := eval[int](t, ctx, fetchPost("resolve", map[string]string{"op": "release", "scope": f.sd.parked.Scope, "id": f.sd.parked.ID,
			"token": itoa(before.Token)}), chromedp.EvalAwaitPromise)
		if forms != 0 {
			t.Errorf("a read-only console shows %d action forms or buttons", forms)
		}
		if status != http.StatusForbidden {
			t.Errorf("POST resolve on a read-only console: %d, want 403", status)
		}
		if after := mustGet(t, f.st, f.sd.parked); after.State != before.State || after.Token != before.Token {
			t.Fatalf("record changed: %+v", after)
		}
	})
	// A console with actions, seen by a browser its Authorize refuses (no
	// operator cookie): no form, no button, the header says read-only and
	// the page says why; with the cookie, the same page offers both forms.
	t.Run("refused viewer", func(t *testing.T) {
		signedIn := func(r *http.Request, a console.Action) (string, error) {
			if ck, err := r.Cookie("operator"); err != nil || ck.Value != "alice" {
				return "", errors.New("sign in first")
			}
			return "alice", nil
		}
		f := newFixture(t, stores[1].open(t), signedIn, nil)
		controls := `document.querySelectorAll('form[method=post], button').length`
		do(t, ctx, chromedp.Navigate(recordPage(f, f.sd.parked)), chromedp.WaitVisible(chromedp.ID("rec-state")))
		if n, mode, why := eval[int](t, ctx, controls), text(t, ctx, "span.mode"), text(t, ctx, "#no-actions"); n != 0 || mode != "read-only" || !strings.Contains(why, "sign in first") {
			t.Errorf("a refused viewer: %d forms or buttons, header %q, note %q; want none, read-only, why", n, mode, why)
		}
		do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.cookie = "operator=alice; path=/"`), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("release")))
		if n, mode := eval[int](t, ctx, `document.querySelectorAll('form[action="resolve"]').length`), text(t, ctx, "span.mode"); n != 2 || mode != "actions enabled" {
			t.Errorf("a signed-in viewer: %d resolve forms, header %q; want 2, actions enabled", n, mode)
		}
	})
	t.Run("forged", func(t *testing.T) {
		f := newFixture(t, stores[1].open(t), operator, nil)
		before := mustGet(t, f.st, f.sd.parked)
		fields := map[string]string{"op": "release", "scope": f.sd.parked.Scope, "id": f.sd.parked.ID, "token": itoa(before.Token), "confirm": "on"}
		do(t, ctx, chromedp.Navigate(recordPage(f, f.sd.parked))) // the browser has its CSRF cookie now
		noToken := eval[int](t, ctx, fetchPost("resolve", fields), chromedp.EvalAwaitPromise)
		fields["csrf"] = strings.Repeat("A", 43)
		badToken := eval[int](t, ctx, fetchPost("resolve", fields), chromedp.EvalAwaitPromise)
		if noToken != http.StatusForbidden || badToken != http.StatusForbidden {
			t.Errorf("same-origin POST without the token: %d, with a wrong one: %d; want 403, 403", noToken, badToken)
		}
		// A page on another origin posts a form to the console in the
		// operator's browser: the classic forgery.
		attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!doctype html><form method="post" action="%sresolve">`, f.base)
			for k, v := range fields {
				fmt.Fprintf(w, `<input type="hidden" name="%s" value="%s">`, k, v)
			}
			fmt.Fprint(w, `</form><script>document.forms[0].submit()</script>`)
		}))
		defer attacker.Close()
		do(t, ctx, chromedp.Navigate(attacker.URL), chromedp.WaitVisible(chromedp.CSS("p.error")))
		refused := text(t, ctx, "p.error")
		if !strings.Contains(refused, "refused") && !strings.Contains(refused, "CSRF") {
			t.Errorf("the forged cross-origin POST was answered %q", refused)
		}
		if after := mustGet(t, f.st, f.sd.parked); after.State != before.State || after.Token != before.Token {
			t.Fatalf("a forged POST changed the record: %+v", after)
		}
	})
}

func TestBrowserUntrustedTextStaysText(t *testing.T) {
	ctx := browser(t)
	rec := console.NewRecorder(console.RecorderOptions{})
	f := newFixture(t, stores[1].open(t), operator, rec)
	bg := context.Background()
	rec.Observe(bg, idem.Event{Key: f.sd.xss, Outcome: idem.OutcomeConflict,
		Err: &idem.ConflictError{Key: f.sd.xss, Fingerprint: `<img id="pwned" src=x onerror="window.__pwned=7">`, Record: idem.Record{Fingerprint: `"><b id="pwned">`}}})
	rec.Observe(bg, idem.Event{Key: f.sd.xssOld, Outcome: idem.OutcomeStale})
	rec.Observe(bg, idem.Event{Key: f.sd.xss, Outcome: idem.OutcomeProcessed, Claim: time.Millisecond, Handler: 2 * time.Millisecond})
	rec.DeadLetter(idem.Result{Key: f.sd.xss}, fmt.Errorf(`handler: <script>window.__pwned=8</script>`), `<i id="pwned">`)
	pages := []string{f.base, f.base + "records", f.base + "records?scope=" + url.QueryEscape(xssScope), f.base + "inprogress",
		f.base + "parked", f.base + "conflicts", recordPage(f, f.sd.xss), recordPage(f, f.sd.xssOld), f.base + "outbox", f.base + "outbox?state=pending"}
	for _, p := range pages {
		do(t, ctx, chromedp.Navigate(p))
		got := eval[pwned](t, ctx, pwnedCheck)
		if got.Flag != 0 || got.Elements != 0 {
			t.Errorf("%s: a hostile value was interpreted: %+v", p, got)
		}
	}
	// The record's page shows each value exactly, as text.
	do(t, ctx, chromedp.Navigate(recordPage(f, f.sd.xss)))
	scope := eval[string](t, ctx, `document.getElementById('rec-scope').textContent`)
	key := eval[string](t, ctx, `document.getElementById('rec-key').textContent`)
	result := eval[string](t, ctx, `document.getElementById('rec-result').textContent`)
	if scope != xssScope || key != xssKey || result != xssResult {
		t.Errorf("record page shows\n scope  %q\n key    %q\n result %q\nwant\n scope  %q\n key    %q\n result %q", scope, key, result, xssScope, xssKey, xssResult)
	}
	do(t, ctx, chromedp.Navigate(f.base+"parked"))
	listed := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('td.key')).map(td => td.textContent)`)
	found := false
	for _, k := range listed {
		found = found || strings.HasPrefix(k, xssStale)
	}
	if !found {
		t.Errorf("the parked page does not show the hostile key as text: %q", listed)
	}
}

func TestBrowserKeyboardPhoneAndScreenshot(t *testing.T) {
	ctx := browser(t)
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	clock := now
	rec := console.NewRecorder(console.RecorderOptions{Clock: func() time.Time { return clock }})
	// An hour of traffic for the charts: a steady rate, duplicates rising
	// in the last quarter, one conflict, some in-progress retries.
	bg := context.Background()
	for m := 59; m >= 0; m-- {
		clock = now.Add(-time.Duration(m) * time.Minute)
		for i := range 40 + (m*7)%13 {
			rec.Observe(bg, idem.Event{Key: idem.Key{Scope: "billing", ID: "o"}, Outcome: idem.OutcomeProcessed,
				Claim: time.Duration(800+(i*37)%900) * time.Microsecond, Handler: time.Duration(5+(i*13)%40) * time.Millisecond})
		}
		dups := 2 + m%3
		if m < 15 {
			dups += 15 - m
		}
		for range dups {
			rec.Observe(bg, idem.Event{Key: idem.Key{Scope: "billing", ID: "o"}, Outcome: idem.OutcomeDuplicate, Claim: 700 * time.Microsecond})
		}
		if m%10 == 3 {
			rec.Observe(bg, idem.Event{Key: idem.Key{Scope: "billing", ID: "o"}, Outcome: idem.OutcomeInProgress, Claim: time.Millisecond})
		}
		for i := range 10 {
			rec.Observe(bg, idem.Event{Key: idem.Key{Scope: "mailer", ID: "w"}, Outcome: idem.OutcomeProcessed,
				Claim: time.Millisecond, Handler: time.Duration(80+i*9) * time.Millisecond})
		}
	}
	clock = now
	rec.Observe(bg, idem.Event{Key: idem.Key{Scope: "billing", ID: "order-0042"}, Outcome: idem.OutcomeConflict,
		Err: &idem.ConflictError{Fingerprint: "sha256:9f2c", Record: idem.Record{Fingerprint: "sha256:41be"}}})
	st := stores[1].open(t)
	f := newFixtureWith(t, st, operator, rec, false)

	// Keyboard: the first Tab reaches the skip link, which leads to the content.
	do(t, ctx, chromedp.Navigate(f.base), chromedp.KeyEvent("\t"))
	focused := eval[string](t, ctx, `document.activeElement.textContent`)
	if focused != "Skip to content" {
		t.Errorf("first Tab focuses %q, want the skip link", focused)
	}
	// Every form control has a label.
	for _, p := range []string{f.base, f.base + "records", recordPage(f, f.sd.parked)} {
		do(t, ctx, chromedp.Navigate(p))
		unlabelled := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea')).filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.outerHTML)`)
		if len(unlabelled) > 0 {
			t.Errorf("%s: controls without a label: %v", p, unlabelled)
		}
	}

	shot := func(name string, url string, keep bool) {
		do(t, ctx, chromedp.Navigate(url))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		dir := os.Getenv("IDEM_ARTIFACTS")
		if dir == "" {
			dir = t.TempDir()
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
		if keep && *updateScreenshot {
			if err := os.WriteFile(filepath.Join("..", "..", "testdata", name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	shot("console.png", f.base, true)
	shot("console-record.png", recordPage(f, f.sd.parked), true)
	shot("console-outbox.png", f.base+"outbox", false)

	// A phone: nothing wider than the screen but the tables, which scroll
	// in their own boxes.
	do(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	for _, p := range []string{f.base, f.base + "records", recordPage(f, f.sd.parked), f.base + "conflicts"} {
		type width struct {
			Page   int `json:"page"`
			Screen int `json:"screen"`
		}
		do(t, ctx, chromedp.Navigate(p))
		over := eval[width](t, ctx, `({page: document.documentElement.scrollWidth, screen: window.innerWidth})`)
		if over.Page > over.Screen {
			t.Errorf("%s on a phone: the page is %dpx wide on a %dpx screen", p, over.Page, over.Screen)
		}
	}
	shot("console-phone.png", f.base, false)
	do(t, ctx, chromedp.ResetViewport())

	// The vendored htmx runs under the Content-Security-Policy and refreshes
	// the counts in place: the store changes, the live region follows.
	do(t, ctx, chromedp.Navigate(f.base))
	if !eval[bool](t, ctx, `typeof htmx === 'object' && htmx.version.startsWith('2.')`) {
		t.Fatal("htmx did not load")
	}
	rec0 := mustGet(t, f.st, f.sd.parked)
	if err := f.st.Release(context.Background(), idem.ReleaseRequest{Key: f.sd.parked, Token: rec0.Token, Now: f.sd.now}); err != nil {
		t.Fatal(err)
	}
	eval[chromedp.Void](t, ctx, `htmx.ajax('GET', './', {target: '#live', select: '#live', swap: 'outerHTML'})`, chromedp.EvalAwaitPromise)
	var billing map[string]int64
	for _, r := range eval[[]countRow](t, ctx, readCounts) {
		if r.Scope == "billing" {
			billing = r.Counts
		}
	}
	if billing["stale"] != 0 || billing["released"] != 2 {
		t.Errorf("after a release and a refresh, billing shows %v; want 0 stale, 2 released", billing)
	}

}
