package integration_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserDeadLetters: an operator finds the dead letters from the
// navigation, opens one beside its stored record, ticks two and replays
// them after confirming, then replays every conflict; the queue sees
// exactly those replays, and no hostile value runs on any page.
func TestBrowserDeadLetters(t *testing.T) {
	ctx := browser(t)
	f, q := dlqFixture(t, operator)
	noScript := func(where string) {
		t.Helper()
		if got := eval[pwned](t, ctx, pwnedCheck); got.Flag != 0 || got.Elements != 0 {
			t.Errorf("%s: a hostile value was interpreted: %+v", where, got)
		}
	}
	do(t, ctx,
		chromedp.Navigate(f.base),
		chromedp.Click(chromedp.Search(`//nav//a[text()="Dead letters"]`)),
		chromedp.WaitVisible(chromedp.CSS("table.deadletters")),
	)
	noScript("the list")
	ids := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('table.deadletters tbody tr[data-id]')).map(tr => tr.dataset.id)`)
	if fmt.Sprint(ids) != fmt.Sprint([]string{"1", "2", "3", "4", xssDLID}) {
		t.Fatalf("the list shows %q", ids)
	}
	reasons := eval[map[string]string](t, ctx, `Object.fromEntries(Array.from(document.querySelectorAll('table.reasons tr[data-reason]')).map(tr => [tr.dataset.reason, tr.querySelector('td[data-count]').textContent]))`)
	if reasons["conflict"] != "2" || reasons[xssDLReason] != "1" || len(reasons) != 4 {
		t.Errorf("reasons shown as %v", reasons)
	}

	// One dead letter beside its stored record.
	do(t, ctx,
		chromedp.Click(chromedp.Search(`//table[contains(@class,"deadletters")]//td[@class="key"]/a[text()="1"]`)),
		chromedp.WaitVisible(chromedp.ID("dl-verdict")),
	)
	verdict := eval[string](t, ctx, `document.getElementById('dl-verdict').dataset.verdict`)
	if fp, stored := text(t, ctx, "#dl-fp"), text(t, ctx, "#dl-rec-fp"); verdict != "other" || fp != "fp-other" || stored != "fp-order-001" {
		t.Errorf("dead letter 1: verdict %q, fingerprints %q beside %q; want other, fp-other beside fp-order-001", verdict, fp, stored)
	}
	do(t, ctx, chromedp.Navigate(dlPage(f, xssDLID)), chromedp.WaitVisible(chromedp.ID("dl-body")))
	noScript("the hostile dead letter")
	shown := eval[map[string]string](t, ctx, `({id: document.getElementById('dl-id').textContent, body: document.getElementById('dl-body').textContent,
		error: document.getElementById('dl-error').textContent, reason: document.getElementById('dl-reason').textContent,
		evil: Array.from(document.querySelectorAll('table.headers tr')).filter(tr => tr.cells[0].textContent === 'X-Evil').map(tr => tr.cells[1].textContent).join()})`)
	if shown["id"] != xssDLID || shown["body"] != xssDLBody || shown["error"] != xssDLError || shown["reason"] != xssDLReason || shown["evil"] != xssDLHeader {
		t.Errorf("the hostile dead letter is shown as %q", shown)
	}

	// On a phone nothing is wider than the screen but the tables, which
	// scroll in their own boxes.
	do(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	for _, p := range []string{f.base + "deadletters", dlPage(f, "1"), dlPage(f, xssDLID)} {
		do(t, ctx, chromedp.Navigate(p))
		if over := eval[[]int](t, ctx, `[document.documentElement.scrollWidth, window.innerWidth]`); over[0] > over[1] {
			t.Errorf("%s on a phone: the page is %dpx wide on a %dpx screen", p, over[0], over[1])
		}
	}
	do(t, ctx, chromedp.ResetViewport())

	// A selection, confirmed.
	do(t, ctx,
		chromedp.Navigate(f.base+"deadletters"),
		chromedp.Click(chromedp.CSS(`input[name=id][value="1"]`)),
		chromedp.Click(chromedp.CSS(`input[name=id][value="3"]`)),
		chromedp.Click(chromedp.ID("replay-selected")),
		chromedp.WaitVisible(chromedp.ID("confirm-replay")),
	)
	noScript("the confirmation")
	confirmIDs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('table.replay tbody tr[data-id]')).map(tr => tr.dataset.id)`)
	if fmt.Sprint(confirmIDs) != "[1 3]" || len(q.taken()) != 0 {
		t.Fatalf("the confirmation shows %q, the queue replayed %v before it", confirmIDs, q.taken())
	}
	do(t, ctx, chromedp.Click(chromedp.ID("confirm-replay")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if flash := text(t, ctx, "p.flash"); !strings.Contains(flash, "Replayed 2 of 2 dead letters") || !strings.Contains(flash, "(alice)") {
		t.Errorf("flash %q", flash)
	}
	if got := q.taken(); fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("the queue replayed %v, want 1 and 3", got)
	}
	left := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('table.deadletters tbody tr[data-id]')).map(tr => tr.dataset.id)`)
	if fmt.Sprint(left) != fmt.Sprint([]string{"2", "4", xssDLID}) {
		t.Errorf("after the replay the list shows %q", left)
	}

	// Every conflict, confirmed; then the hostile one, confirmed from its page.
	do(t, ctx,
		chromedp.Click(chromedp.Search(`//button[@aria-label="Replay every conflict dead letter"]`)),
		chromedp.WaitVisible(chromedp.ID("confirm-replay")),
		chromedp.Click(chromedp.ID("confirm-replay")),
		chromedp.WaitVisible(chromedp.CSS("p.flash")),
		chromedp.Navigate(dlPage(f, xssDLID)),
		chromedp.Click(chromedp.ID("replay-one")),
		chromedp.WaitVisible(chromedp.ID("confirm-replay")),
	)
	noScript("the hostile confirmation")
	do(t, ctx, chromedp.Click(chromedp.ID("confirm-replay")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if got := q.taken(); fmt.Sprint(got) != fmt.Sprint([]string{"1", "3", "4", xssDLID}) {
		t.Fatalf("the queue replayed %q", got)
	}
	if n := strings.Count(f.logs.String(), `"msg":"idem console: dead letter replayed"`); n != 4 || !strings.Contains(f.logs.String(), `"who":"alice"`) {
		t.Errorf("%d replays logged, want 4 with who:\n%s", n, f.logs)
	}
}

func TestBrowserDeadLetterReplayRefused(t *testing.T) {
	ctx := browser(t)
	t.Run("read-only", func(t *testing.T) {
		f, q := dlqFixture(t, nil)
		do(t, ctx, chromedp.Navigate(f.base+"deadletters"), chromedp.WaitVisible(chromedp.CSS("table.deadletters")))
		controls := eval[int](t, ctx, `document.querySelectorAll('form[method=post], input[type=checkbox]').length`)
		status := eval[int](t, ctx, fetchPost("deadletters-replay", map[string]string{"queue": "0", "id": "1", "confirm": "yes"}), chromedp.EvalAwaitPromise)
		if controls != 0 || status != http.StatusForbidden {
			t.Errorf("a read-only console: %d replay controls, a same-origin replay POST answered %d; want 0 and 403", controls, status)
		}
		if len(q.taken()) != 0 {
			t.Fatalf("a read-only console replayed %v", q.taken())
		}
	})
	t.Run("forged", func(t *testing.T) {
		f, q := dlqFixture(t, operator)
		do(t, ctx, chromedp.Navigate(f.base+"deadletters")) // the browser has its CSRF cookie now
		fields := map[string]string{"queue": "0", "id": "2", "confirm": "yes"}
		if status := eval[int](t, ctx, fetchPost("deadletters-replay", fields), chromedp.EvalAwaitPromise); status != http.StatusForbidden {
			t.Errorf("a same-origin replay POST without the CSRF token: %d, want 403", status)
		}
		// A page on another origin posts the confirmation in the
		// operator's browser.
		attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!doctype html><form method="post" action="%sdeadletters-replay">`, f.base)
			for k, v := range fields {
				fmt.Fprintf(w, `<input type="hidden" name="%s" value="%s">`, k, v)
			}
			fmt.Fprint(w, `</form><script>document.forms[0].submit()</script>`)
		}))
		defer attacker.Close()
		do(t, ctx, chromedp.Navigate(attacker.URL), chromedp.WaitVisible(chromedp.CSS("p.error")))
		if refused := text(t, ctx, "p.error"); !strings.Contains(refused, "refused") && !strings.Contains(refused, "CSRF") {
			t.Errorf("the forged cross-origin replay was answered %q", refused)
		}
		if len(q.taken()) != 0 || q.len() != 5 {
			t.Fatalf("a forged POST replayed %v", q.taken())
		}
	})
}
