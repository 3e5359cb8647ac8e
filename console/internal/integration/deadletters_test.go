package integration_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
)

// memQueue is a dead-letter queue in memory: Replay removes each replayed
// dead letter, as NATS, RabbitMQ and Service Bus do.
type memQueue struct {
	name string
	mu   sync.Mutex
	dls  []console.BrokerDeadLetter
	// replayed are the ids Replay took, in order.
	replayed []string
	// fail makes Replay fail for these ids (the dead letter stays).
	fail map[string]error
	// listErr makes List fail.
	listErr error
}

func (q *memQueue) Name() string { return q.name }

func (q *memQueue) List(_ context.Context, limit int) ([]console.BrokerDeadLetter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.listErr != nil {
		return nil, q.listErr
	}
	n := len(q.dls)
	if limit > 0 && limit < n {
		n = limit
	}
	return slices.Clone(q.dls[:n]), nil
}

func (q *memQueue) Replay(_ context.Context, ids []string, done func(console.BrokerDeadLetter, error)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var kept []console.BrokerDeadLetter
	for _, dl := range q.dls {
		if !slices.Contains(ids, dl.ID) {
			kept = append(kept, dl)
			continue
		}
		if err := q.fail[dl.ID]; err != nil {
			kept = append(kept, dl)
			done(dl, err)
			continue
		}
		q.replayed = append(q.replayed, dl.ID)
		done(dl, nil)
	}
	q.dls = kept
	return nil
}

func (q *memQueue) taken() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.replayed)
}

func (q *memQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.dls)
}

// Hostile dead-letter values, as seed's hostile records: each would run
// script or add an element with id "pwned" if it were interpreted.
const (
	xssDLID     = `7"><img id="pwned" src=x onerror="window.__pwned=20">`
	xssDLBody   = `</pre><script>window.__pwned=21</script><b id="pwned">`
	xssDLHeader = `<script>window.__pwned=22</script><svg id="pwned" onload="window.__pwned=23">`
	xssDLReason = `perm"><i id="pwned">`
	xssDLError  = `<iframe id="pwned" srcdoc="<script>parent.__pwned=24</script>"></iframe>`
)

// seedQueue holds dead letters of the seeded store's keys: a conflict
// (other content than order-001's record), a permanent failure of
// order-002's own content (completed since), a max_deliver of a key with
// no record, a second conflict, and a hostile one of the hostile record.
func seedQueue(sd seeded) *memQueue {
	dl := func(id, reason, key, fp string, age time.Duration) console.BrokerDeadLetter {
		h := map[string]string{idem.HeaderReason: reason, idem.HeaderDeadLetterKey: key, idem.HeaderFingerprint: fp, "Nats-Msg-Id": "m-" + id}
		if reason == "conflict" {
			h[idem.HeaderStoredState], h[idem.HeaderStoredFingerprint] = "completed", "fp-order-001"
		}
		return console.BrokerDeadLetter{ID: id, Reason: reason, Error: reason + " error", Key: key, Fingerprint: fp, Source: "orders",
			At: sd.now.Add(-age), Headers: h, Body: []byte(`{"order":"` + id + `"}`)}
	}
	q := &memQueue{name: "nats://127.0.0.1:4222?dlq=ORDERS_DLQ", fail: map[string]error{}}
	q.dls = []console.BrokerDeadLetter{
		dl("1", "conflict", "billing/order-001", "fp-other", 3*time.Hour),
		dl("2", "permanent", "billing/order-002", "fp-order-002", 2*time.Hour),
		dl("3", "max_deliver", "billing/order-none", "fp-x", time.Hour),
		dl("4", "conflict", "billing/order-003", "fp-other-3", 30*time.Minute),
	}
	if sd.xss != (idem.Key{}) {
		x := dl(xssDLID, xssDLReason, sd.xss.Scope+"/"+sd.xss.ID, "fp-"+sd.xss.ID, time.Minute)
		x.Error, x.Body, x.Source = xssDLError, []byte(xssDLBody), xssDLHeader
		x.Headers["X-Evil"] = xssDLHeader
		x.Headers[xssDLHeader] = "hostile name"
		q.dls = append(q.dls, x)
	}
	return q
}

// withQueue gives the fixture's console the queue.
func withQueue(q console.DeadLetters) func(*console.Options) {
	return func(o *console.Options) { o.DeadLetters = []console.DeadLetters{q} }
}

// dlqFixture is a console over a seeded store and a seeded queue.
func dlqFixture(t *testing.T, authorize func(*http.Request, console.Action) (string, error), more ...func(*console.Options)) (*fixture, *memQueue) {
	t.Helper()
	q := &memQueue{}
	f := newFixtureWith(t, stores[0].open(t), authorize, nil, true, append(more, withQueue(q))...)
	s := seedQueue(f.sd) // of the seeded store's keys: filled before the first request
	q.name, q.dls, q.fail = s.name, s.dls, s.fail
	return f, q
}

func dlPage(f *fixture, id string) string {
	return f.base + "deadletter?" + url.Values{"queue": {"0"}, "id": {id}}.Encode()
}

var verdictRE = regexp.MustCompile(`id="dl-verdict" data-verdict="([a-z]+)"`)

func TestDeadLetterPages(t *testing.T) {
	f, q := dlqFixture(t, nil)
	c := f.client(t)
	code, body := get(t, c, f.base+"deadletters")
	if code != http.StatusOK {
		t.Fatalf("dead letters: %d\n%s", code, body)
	}
	for _, want := range []string{`<tr data-reason="conflict"><td><a href="deadletters?queue=0&amp;reason=conflict">conflict</a></td><td data-count>2</td>`,
		`data-reason="max_deliver"`, `data-reason="permanent"`, `<tr data-id="1">`, `<tr data-id="4">`, "3h 0m ago", "billing/order-none",
		`<li><a href="deadletters" aria-current="page">Dead letters</a>`, "any (5)"} {
		if !strings.Contains(body, want) {
			t.Errorf("the list lacks %q", want)
		}
	}
	if strings.Contains(body, `type="checkbox"`) || strings.Contains(body, `action="deadletters-replay"`) {
		t.Error("a read-only console offers replays")
	}
	_, body = get(t, c, f.base+"deadletters?queue=0&reason=conflict")
	rows := regexp.MustCompile(`<tr data-id="([^"]*)">`).FindAllStringSubmatch(body, -1)
	if len(rows) != 2 || rows[0][1] != "1" || rows[1][1] != "4" {
		t.Errorf("filtered by conflict: rows %v, want 1 and 4", rows)
	}

	for _, tc := range []struct {
		id, verdict string
		want        []string
	}{
		{"1", "other", []string{"fp-other", "fp-order-001", "dead-lettered again as a conflict", `href="record?id=order-001&amp;scope=billing"`}},
		{"2", "same", []string{"fp-order-002", "a duplicate", `{&#34;order&#34;:&#34;2&#34;}`}},
		{"3", "none", []string{"No record holds the key", "no record (never claimed, or swept)"}},
	} {
		code, body := get(t, c, dlPage(f, tc.id))
		m := verdictRE.FindStringSubmatch(body)
		if code != http.StatusOK || m == nil || m[1] != tc.verdict {
			t.Errorf("dead letter %s: %d, verdict %v, want %s\n%s", tc.id, code, m, tc.verdict, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("dead letter %s: the page lacks %q", tc.id, w)
			}
		}
	}
	if code, _ := get(t, c, dlPage(f, "99")); code != http.StatusNotFound {
		t.Errorf("a dead letter not there: %d, want 404", code)
	}
	if code, _ := get(t, c, f.base+"deadletters?queue=3"); code != http.StatusBadRequest {
		t.Errorf("a queue not there: %d, want 400", code)
	}
	if q.len() != 5 || len(q.taken()) != 0 {
		t.Errorf("reading the pages changed the queue: %d left, %v replayed", q.len(), q.taken())
	}
	q.mu.Lock()
	q.listErr = errors.New("nats: connection closed")
	q.mu.Unlock()
	for _, p := range []string{f.base + "deadletters", dlPage(f, "1")} {
		if code, body := get(t, c, p); code != http.StatusBadGateway || !strings.Contains(body, "ORDERS_DLQ failed: nats: connection closed") {
			t.Errorf("%s with a broker down: %d\n%s", p, code, body)
		}
	}
	plain := newFixture(t, stores[0].open(t), nil, nil)
	if code, body := get(t, plain.client(t), plain.base+"deadletters"); code != http.StatusNotFound || !strings.Contains(body, "Options.DeadLetters") {
		t.Errorf("dead letters without a queue: %d\n%s", code, body)
	}
	if _, body := get(t, plain.client(t), plain.base); strings.Contains(body, `href="deadletters"`) {
		t.Error("the navigation links a dead-letters page that does not exist")
	}
}

// formOf is the named form's fields as the page renders them.
func formOf(t *testing.T, body, label string) url.Values {
	t.Helper()
	i := strings.Index(body, `aria-label="`+label+`"`)
	if i < 0 {
		t.Fatalf("no form %q on the page:\n%s", label, body)
	}
	form := body[i : i+strings.Index(body[i:], "</form>")]
	v := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(form, -1) {
		v.Add(m[1], html.UnescapeString(m[2]))
	}
	return v
}

func TestDeadLetterReplayWithConfirmation(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []console.Action
	)
	authorize := func(r *http.Request, a console.Action) (string, error) {
		mu.Lock()
		seen = append(seen, a)
		mu.Unlock()
		return operator(r, a)
	}
	f, q := dlqFixture(t, authorize)
	c := f.client(t)
	_, list := get(t, c, f.base+"deadletters")
	m := csrfRE.FindStringSubmatch(list)
	if m == nil || !strings.Contains(list, `name="id" value="3"`) {
		t.Fatalf("no selection form on the list:\n%s", list)
	}
	token := html.UnescapeString(m[1])

	// A selection: the first POST shows it, the second replays it.
	resp, page := post(t, c, f.base+"deadletters-replay", url.Values{"csrf": {token}, "queue": {"0"}, "id": {"1", "3", "gone"}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `<strong data-count="replay">2</strong>`) || !strings.Contains(page, "Not in the queue any more") {
		t.Fatalf("confirmation of 1, 3 and a missing id: %d\n%s", resp.StatusCode, page)
	}
	if len(q.taken()) != 0 {
		t.Fatalf("the confirmation page replayed %v", q.taken())
	}
	confirm := formOf(t, page, "Confirm the replay")
	if got := confirm["id"]; fmt.Sprint(got) != "[1 3]" || confirm.Get("confirm") != "yes" {
		t.Fatalf("the confirmation form: %v", confirm)
	}
	resp, body := post(t, c, f.base+"deadletters-replay", confirm, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed replay: %d\n%s", resp.StatusCode, body)
	}
	if got := q.taken(); fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("replayed %v, want 1 and 3", got)
	}
	_, done := get(t, c, f.srv.URL+resp.Header.Get("Location"))
	if !strings.Contains(done, "Replayed 2 of 2 dead letters from nats://127.0.0.1:4222?dlq=ORDERS_DLQ (alice).") {
		t.Errorf("no confirmation after the replay:\n%s", done)
	}

	// All of a reason: the ids shown are the ones replayed, even if more
	// of the reason arrive between the two POSTs.
	resp, page = post(t, c, f.base+"deadletters-replay", url.Values{"csrf": {token}, "queue": {"0"}, "reason": {"conflict"}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "every one of reason conflict") || !strings.Contains(page, `<tr data-id="4">`) {
		t.Fatalf("confirmation of every conflict: %d\n%s", resp.StatusCode, page)
	}
	q.mu.Lock()
	q.dls = append(q.dls, console.BrokerDeadLetter{ID: "late", Reason: "conflict"})
	q.mu.Unlock()
	if resp, body := post(t, c, f.base+"deadletters-replay", formOf(t, page, "Confirm the replay"), nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed replay of the conflicts: %d\n%s", resp.StatusCode, body)
	}
	if got := q.taken(); fmt.Sprint(got) != "[1 3 4]" {
		t.Fatalf("replayed %v, want 1, 3 and then only 4 (not the late conflict)", got)
	}

	// One, from its page; the broker refuses it.
	_, one := get(t, c, dlPage(f, "2"))
	q.mu.Lock()
	q.fail["2"] = errors.New("broker: publish refused")
	q.mu.Unlock()
	_, page = post(t, c, f.base+"deadletters-replay", formOf(t, one, "Replay this dead letter"), nil)
	resp, body = post(t, c, f.base+"deadletters-replay", formOf(t, page, "Confirm the replay"), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "2: broker: publish refused") || !strings.Contains(body, "Replayed 0 of 1") {
		t.Errorf("a replay the broker refuses: %d\n%s", resp.StatusCode, body)
	}

	logs := f.logs.String()
	if n := strings.Count(logs, `"msg":"idem console: dead letter replayed"`); n != 3 {
		t.Errorf("%d replays logged, want 3:\n%s", n, logs)
	}
	for _, want := range []string{`"who":"alice"`, `"id":"3"`, `"reason":"max_deliver"`, `"key":"billing/order-none"`, `"chosen_by_reason":"conflict"`,
		`"queue":"nats://127.0.0.1:4222?dlq=ORDERS_DLQ"`, `"msg":"idem console: dead-letter replay failed"`, `"error":"broker: publish refused"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var taken []console.Action // the actions asked for, not the forms offered
	for _, a := range seen {
		if !a.Offer {
			taken = append(taken, a)
		}
	}
	if len(taken) == 0 || taken[0].Op != console.OpDeadLetterReplay || taken[0].Queue != q.name || fmt.Sprint(taken[0].IDs) != "[1 3 gone]" {
		t.Errorf("Authorize was asked %+v", seen)
	}
	if len(seen) == 0 || !seen[0].Offer || seen[0].Op != console.OpDeadLetterReplay || seen[0].Queue != q.name {
		t.Errorf("the list page did not ask Authorize whether to offer its replay form: %+v", seen)
	}
}

func TestDeadLetterReplayRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		authorize func(*http.Request, console.Action) (string, error)
		more      []func(*console.Options)
	}{
		{"no Authorize", nil, nil},
		{"ReadOnly", operator, []func(*console.Options){func(o *console.Options) { o.ReadOnly = true }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, q := dlqFixture(t, tc.authorize, tc.more...)
			c := f.client(t)
			for _, p := range []string{f.base + "deadletters", dlPage(f, "1")} {
				if _, body := get(t, c, p); strings.Contains(body, `action="deadletters-replay"`) || strings.Contains(body, `type="checkbox"`) {
					t.Errorf("%s: a read-only console offers a replay", p)
				}
			}
			for _, form := range []url.Values{{"queue": {"0"}, "id": {"1"}}, {"queue": {"0"}, "id": {"1"}, "confirm": {"yes"}}, {"queue": {"0"}, "reason": {"conflict"}}} {
				if resp, body := post(t, c, f.base+"deadletters-replay", form, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
					t.Errorf("replay %v: %d, want 403\n%s", form, resp.StatusCode, body)
				}
			}
			if q.len() != 5 || len(q.taken()) != 0 {
				t.Fatalf("a read-only console replayed %v", q.taken())
			}
		})
	}
	t.Run("forged", func(t *testing.T) {
		f, q := dlqFixture(t, operator)
		c := f.client(t)
		_, page := get(t, c, f.base+"deadletters")
		token := html.UnescapeString(csrfRE.FindStringSubmatch(page)[1])
		confirm := func(csrf string) url.Values {
			return url.Values{"queue": {"0"}, "id": {"1"}, "confirm": {"yes"}, "csrf": {csrf}}
		}
		for _, tc := range []struct {
			name   string
			form   url.Values
			header http.Header
			client *http.Client
		}{
			{"no token", confirm(""), nil, c},
			{"wrong token", confirm("AAAA" + token[4:]), nil, c},
			{"token of another browser", confirm(token), nil, f.client(t)},
			{"cross-site", confirm(token), http.Header{"Sec-Fetch-Site": {"cross-site"}}, c},
			{"other origin", confirm(token), http.Header{"Origin": {"http://evil.example"}}, c},
			{"hook refuses", confirm(token), http.Header{"X-Deny": {"1"}}, c},
		} {
			if resp, body := post(t, tc.client, f.base+"deadletters-replay", tc.form, tc.header); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: %d, want 403\n%s", tc.name, resp.StatusCode, body)
			}
		}
		if code, _ := get(t, c, f.base+"deadletters-replay?"+confirm(token).Encode()); code != http.StatusMethodNotAllowed {
			t.Errorf("GET deadletters-replay: %d, want 405", code)
		}
		for _, form := range []url.Values{{"queue": {"0"}, "csrf": {token}}, {"queue": {"0"}, "confirm": {"yes"}, "reason": {"conflict"}, "csrf": {token}}} {
			if resp, _ := post(t, c, f.base+"deadletters-replay", form, nil); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("replay of nothing named %v: %d, want 400", form, resp.StatusCode)
			}
		}
		if q.len() != 5 || len(q.taken()) != 0 {
			t.Fatalf("a refused request replayed %v", q.taken())
		}
		if logs := f.logs.String(); !strings.Contains(logs, `"who":"mallory"`) || !strings.Contains(logs, `"op":"dead_letter_replay"`) {
			t.Errorf("refusals not logged with who asked:\n%s", logs)
		}
	})
}

// TestDeadLetterTextIsEscaped checks the HTML of every dead-letter page:
// hostile ids, reasons, errors, headers and bodies appear escaped, never as
// markup. The browser test checks that nothing runs.
func TestDeadLetterTextIsEscaped(t *testing.T) {
	f, _ := dlqFixture(t, operator)
	c := f.client(t)
	_, page := get(t, c, f.base+"deadletters")
	token := html.UnescapeString(csrfRE.FindStringSubmatch(page)[1])
	bodies := map[string]string{"list": page}
	_, bodies["filtered"] = get(t, c, f.base+"deadletters?"+url.Values{"queue": {"0"}, "reason": {xssDLReason}}.Encode())
	_, bodies["dead letter"] = get(t, c, dlPage(f, xssDLID))
	_, bodies["missing"] = get(t, c, dlPage(f, xssDLBody))
	_, bodies["bad queue"] = get(t, c, f.base+"deadletters?queue="+url.QueryEscape(xssDLHeader))
	_, bodies["confirm"] = post(t, c, f.base+"deadletters-replay", url.Values{"csrf": {token}, "queue": {"0"}, "id": {xssDLID, xssDLBody}}, nil)
	_, bodies["confirm reason"] = post(t, c, f.base+"deadletters-replay", url.Values{"csrf": {token}, "queue": {"0"}, "reason": {xssDLReason}}, nil)
	if !strings.Contains(bodies["dead letter"], `data-verdict="same"`) || !strings.Contains(bodies["confirm"], `data-count="replay">1<`) {
		t.Fatalf("the hostile dead letter is not shown:\n%s\n%s", bodies["dead letter"], bodies["confirm"])
	}
	for name, body := range bodies {
		for _, bad := range []string{"<script>window", `id="pwned"`, "<img", "<svg id", "<iframe", "<b id", "<i id", `onerror="`, `onload="`} {
			if strings.Contains(body, bad) {
				t.Errorf("%s: page contains %q unescaped", name, bad)
			}
		}
	}
}

func TestBrokerDeadLetterKeys(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"billing/k1", "[billing/k1]"},
		{"ORDERS/billing/k1", "[ORDERS/billing/k1 ORDERS/billing/k1]"},
		{"", "[]"}, {"/k", "[]"}, {"k/", "[]"}, {"noslash", "[]"},
	} {
		var got []string
		for _, k := range (console.BrokerDeadLetter{Key: tc.key}).Keys() {
			got = append(got, k.Scope+"/"+k.ID)
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("Keys of %q: %v, want %s", tc.key, got, tc.want)
		}
	}
	keys := (console.BrokerDeadLetter{Key: "ORDERS/billing/k1"}).Keys()
	if keys[0] != (idem.Key{Scope: "ORDERS", ID: "billing/k1"}) || keys[1] != (idem.Key{Scope: "ORDERS/billing", ID: "k1"}) {
		t.Errorf("Keys: %+v", keys)
	}
}

// TestDeadLetterSupersede: a conflict's dead letter offers the operator a
// confirmed action that makes its content the key's truth (idem.Supersede
// with the token read): without the confirmation nothing changes; with it
// the record is released with the dead letter's fingerprint, the action is
// logged with who, and the page then says a replay processes the message.
// A viewer Authorize refuses the supersede is not shown the form.
func TestDeadLetterSupersede(t *testing.T) {
	authorize := func(r *http.Request, a console.Action) (string, error) {
		if a.Op == console.OpSupersede && r.Header.Get("X-No-Supersede") != "" {
			return "bob", errors.New("bob may not supersede")
		}
		return operator(r, a)
	}
	f, _ := dlqFixture(t, authorize)
	c := f.client(t)
	_, page := get(t, c, dlPage(f, "1"))
	form := formOf(t, page, "Supersede the stored content")
	if form.Get("op") != console.OpSupersede || form.Get("fingerprint") != "fp-other" || form.Get("scope") != "billing" || form.Get("id") != "order-001" {
		t.Fatalf("the supersede form: %v", form)
	}
	if _, other := get(t, c, dlPage(f, "2")); strings.Contains(other, "Supersede the stored content") {
		t.Errorf("a dead letter whose content holds the key offers a supersede")
	}
	ctx := context.Background()
	k := idem.Key{Scope: "billing", ID: "order-001"}
	before, err := f.st.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}

	if resp, body := post(t, c, f.base+"resolve", form, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not confirmed") {
		t.Fatalf("supersede without the confirmation: %d\n%s", resp.StatusCode, body)
	}
	if r, _ := f.st.Get(ctx, k); r.Fingerprint != before.Fingerprint || r.State != before.State {
		t.Fatalf("an unconfirmed supersede changed the record: %+v", r)
	}
	form.Set("confirm", "yes")
	resp, body := post(t, c, f.base+"resolve", form, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed supersede: %d\n%s", resp.StatusCode, body)
	}
	r, err := f.st.Get(ctx, k)
	if err != nil || r.State != idem.StateReleased || r.Fingerprint != "fp-other" || r.Token != before.Token {
		t.Fatalf("after the supersede: %+v %v; want released with fp-other, token %d", r, err, before.Token)
	}
	logs := f.logs.String()
	for _, want := range []string{`"msg":"idem console: record superseded"`, `"who":"alice"`, `"from":"` + before.Fingerprint + `"`, `"to":"fp-other"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
	_, page = get(t, c, dlPage(f, "1"))
	if m := verdictRE.FindStringSubmatch(page); m == nil || m[1] != "same" || strings.Contains(page, "Supersede the stored content") {
		t.Errorf("after the supersede the dead letter's content holds the key: verdict %v", m)
	}

	// Another conflict, for a viewer who may replay but not supersede.
	_, page = send(t, c, http.MethodGet, dlPage(f, "4"), nil, http.Header{"X-No-Supersede": {"1"}})
	if strings.Contains(page, "Supersede the stored content") || !strings.Contains(page, "Replay this dead letter") {
		t.Errorf("a viewer refused the supersede sees its form, or no replay form:\n%s", page)
	}
}
