package integration_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/idemgo/idem/console"
)

// getAs reads a page as a viewer the header names (nil: the operator).
func getAs(t *testing.T, c *http.Client, u string, header http.Header) (int, string, []*http.Cookie) {
	t.Helper()
	resp, body := send(t, c, http.MethodGet, u, nil, header)
	return resp.StatusCode, body, resp.Cookies()
}

// actionMarks are what a page shows only to a viewer who may act: a form
// that posts, its CSRF token, its controls, the header's mode.
var actionMarks = []string{`method="post"`, `name="csrf"`, `type="checkbox"`, "actions enabled"}

// A viewer the console would refuse an action is shown no action: the
// operator (allowed by Authorize) sees every page's forms and "actions
// enabled"; a viewer Authorize refuses (X-Deny), a read-only console and
// one without Authorize show none of them, on every page that has some,
// and the header says read-only; the refused viewer is told why, and
// gets no CSRF cookie. A POST from that viewer is still refused, and
// Authorize is asked with Offer set when a page is drawn.
func TestActionsShownOnlyToWhoMayAct(t *testing.T) {
	var (
		mu      sync.Mutex
		offered int // Authorize asked whether to offer an action
	)
	authorize := func(r *http.Request, a console.Action) (string, error) {
		if a.Offer {
			mu.Lock()
			offered++
			mu.Unlock()
		}
		return operator(r, a)
	}
	deny := http.Header{"X-Deny": {"1"}}
	for _, tc := range []struct {
		name      string
		authorize func(*http.Request, console.Action) (string, error)
		more      []func(*console.Options)
		header    http.Header
		acts      bool
		why       string // the page's explanation when it shows no action
	}{
		{"operator", authorize, nil, nil, true, ""},
		{"refused viewer", authorize, nil, deny, false, "These actions are not offered to you: mallory may not"},
		{"read-only console", authorize, []func(*console.Options){func(o *console.Options) { o.ReadOnly = true }}, nil, false, "This console is read-only."},
		{"no Authorize", nil, nil, nil, false, "This console is read-only."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			offered = 0
			mu.Unlock()
			f, _ := dlqFixture(t, tc.authorize, tc.more...)
			c := f.client(t)
			for _, p := range []string{"", "records", recordPage(f, f.sd.parked)[len(f.base):], "outbox?state=parked", "deadletters", dlPage(f, "1")[len(f.base):]} {
				code, body, cookies := getAs(t, c, f.base+p, tc.header)
				if code != http.StatusOK {
					t.Fatalf("%s: %d\n%s", p, code, body)
				}
				for _, m := range actionMarks {
					switch shown := strings.Contains(body, m); {
					case shown && !tc.acts:
						t.Errorf("%s shows %s to a viewer who may not act", p, m)
					case !shown && tc.acts && (p != "records" || m == "actions enabled") && m != `type="checkbox"`:
						t.Errorf("%s does not show %s to the operator", p, m)
					}
				}
				if !tc.acts && !strings.Contains(body, `<span class="mode">read-only</span>`) {
					t.Errorf("%s: the header does not say read-only", p)
				}
				for _, ck := range cookies {
					if ck.Name == "idem_console_csrf" && !tc.acts {
						t.Errorf("%s: a viewer who may not act gets a CSRF cookie", p)
					}
				}
				if tc.why != "" && (strings.HasPrefix(p, "record?") || strings.HasPrefix(p, "deadletter?")) && !strings.Contains(body, tc.why) {
					t.Errorf("%s does not say %q", p, tc.why)
				}
			}
			if tc.authorize != nil && !tc.acts && tc.header != nil {
				rec := mustGet(t, f.st, f.sd.parked)
				resp, body := post(t, c, f.base+"resolve", resolveForm(f.sd.parked, console.OpRelease, rec.Token, ""), tc.header)
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not authorised: mallory may not release") {
					t.Errorf("a refused viewer's resolve: %d\n%s", resp.StatusCode, body)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.authorize != nil && tc.more == nil && offered == 0 {
				t.Error("Authorize was never asked whether to offer an action")
			}
		})
	}
}

// Authorize decides per action: a viewer allowed to release a record but
// not to complete it is shown the Release form alone.
func TestActionsShownPerOperation(t *testing.T) {
	releaseOnly := func(r *http.Request, a console.Action) (string, error) {
		if a.Op == console.OpComplete {
			return "bob", errors.New("bob may only release")
		}
		return "bob", nil
	}
	f := newFixture(t, stores[0].open(t), releaseOnly, nil)
	c := f.client(t)
	_, body := get(t, c, recordPage(f, f.sd.parked))
	if !strings.Contains(body, `aria-label="Release"`) || strings.Contains(body, `aria-label="Complete"`) || !strings.Contains(body, "actions enabled") {
		t.Fatalf("the record page for a viewer who may release only:\n%s", body)
	}
	form := resolveForm(f.sd.parked, console.OpComplete, mustGet(t, f.st, f.sd.parked).Token, csrfRE.FindStringSubmatch(body)[1])
	if resp, body := post(t, c, f.base+"resolve", form, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "bob may only release") {
		t.Errorf("complete by a viewer who may release only: %d\n%s", resp.StatusCode, body)
	}
	if _, body := get(t, c, f.base+"records?"+url.Values{"scope": {"billing"}}.Encode()); !strings.Contains(body, "actions enabled") {
		t.Error("a page without forms says read-only to a viewer who may act")
	}
}
