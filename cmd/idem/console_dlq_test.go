package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

func TestConsoleDLQ(t *testing.T) { eachBroker(t, runConsoleDLQ) }

var (
	dlRowRE   = regexp.MustCompile(`(?s)<tr data-id="([^"]*)">.*?<td data-reason>([^<]*)</td>`)
	verdictRE = regexp.MustCompile(`data-verdict="([a-z]+)"`)
)

// runConsoleDLQ: a real consumer dead-letters a conflict (k1 reused with
// other content) and a permanent failure (k2); 'idem console --broker'
// over the broker's real queue lists both, shows the conflict beside k1's
// stored record, and replays both through HTTP after the confirmation
// page: the conflict is dead-lettered again, k2 is applied once, and the
// log says who replayed.
func runConsoleDLQ(t *testing.T, b dlqBroker) {
	run := startDLQRun(t, b)
	store := run.store
	base, stdout, stderr := startConsoleWith(t, consoleConfig{store: storeFlags{dsn: store}, broker: brokerFlags{url: b.url()}, addr: "127.0.0.1:0", actions: true})
	if !strings.Contains(stdout.String(), "/deadletters") {
		t.Errorf("the console does not say where the dead letters are:\n%s", stdout)
	}
	op, _ := signIn(t, stdout)
	list := func() (ids map[string]string, page string) {
		t.Helper()
		code, page := fetch(t, op, http.MethodGet, base+"deadletters", nil)
		if code != http.StatusOK {
			t.Fatalf("dead letters: %d\n%s", code, page)
		}
		ids = map[string]string{}
		for _, m := range dlRowRE.FindAllStringSubmatch(page, -1) {
			ids[html.UnescapeString(m[1])] = m[2]
		}
		return ids, page
	}
	ids, page := list()
	var conflict, permanent string
	for id, reason := range ids {
		switch reason {
		case "conflict":
			conflict = id
		case "permanent":
			permanent = id
		}
	}
	if len(ids) != 2 || conflict == "" || permanent == "" {
		t.Fatalf("the console lists %v, want a conflict and a permanent failure\n%s", ids, page)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no replay form on the list:\n%s", page)
	}
	csrf := html.UnescapeString(m[1])

	// The conflict beside k1's record: other content holds the key.
	rec, err := findRecord(run.h.Store, "k1") // its scope is the adapter's: billing, ORDERS/billing, ...
	if err != nil {
		t.Fatal(err)
	}

	// The Conflicts page lists the conflict and not the permanent failure,
	// with k1's record linked and the content it is recorded with.
	code, conflicts := fetch(t, op, http.MethodGet, base+"conflicts", nil)
	recLink := `href="` + html.EscapeString("record?"+url.Values{"scope": {rec.Scope}, "id": {rec.ID}}.Encode()) + `"`
	if code != http.StatusOK || !strings.Contains(conflicts, `<tr data-id="`+html.EscapeString(conflict)+`">`) ||
		strings.Contains(conflicts, `<tr data-id="`+html.EscapeString(permanent)+`">`) || !strings.Contains(conflicts, recLink) ||
		!strings.Contains(conflicts, `title="`+rec.Fingerprint+`"`) {
		t.Errorf("the Conflicts page: %d; want the conflict %s with %s and the recorded fingerprint %s, not %s\n%s", code, conflict, recLink, rec.Fingerprint, permanent, conflicts)
	}
	code, shown := fetch(t, op, http.MethodGet, base+"deadletter?"+url.Values{"queue": {"0"}, "id": {conflict}}.Encode(), nil)
	if v := verdictRE.FindStringSubmatch(shown); code != http.StatusOK || v == nil || v[1] != "other" || !strings.Contains(shown, rec.Fingerprint) {
		t.Fatalf("the conflict's page: %d, verdict %v, want other beside the stored fingerprint %s\n%s", code, v, rec.Fingerprint, shown)
	}

	// Replay both: the confirmation first, then the replay.
	run.fix()
	form := url.Values{"csrf": {csrf}, "queue": {"0"}, "id": {conflict, permanent}}
	code, confirm := fetch(t, op, http.MethodPost, base+"deadletters-replay", form)
	if code != http.StatusOK || !strings.Contains(confirm, `<strong data-count="replay">2</strong>`) {
		t.Fatalf("the confirmation: %d\n%s", code, confirm)
	}
	if got, _ := list(); len(got) != 2 {
		t.Fatalf("the confirmation page replayed: %v left", got)
	}
	form.Set("confirm", "yes")
	if code, body := fetch(t, op, http.MethodPost, base+"deadletters-replay", form); code != http.StatusSeeOther {
		t.Fatalf("the replay: %d\n%s", code, body)
	}
	run.checkReplayed(t)
	if logs := stderr.String(); strings.Count(logs, "dead letter replayed") != 2 || !strings.Contains(logs, "who=") {
		t.Errorf("the replays are not logged with who did them:\n%s", logs)
	}
	want := 1 // the conflict, dead-lettered again
	if b.keepsReplayed() {
		want = 3
	}
	if after, page := list(); len(after) != want {
		t.Errorf("after the replay the console lists %v, want %d dead letters\n%s", after, want, page)
	}

	// Without --actions the same queue is shown and never replayed.
	ro, _, _ := startConsoleWith(t, consoleConfig{store: storeFlags{dsn: store}, broker: brokerFlags{url: b.url()}, addr: "127.0.0.1:0"})
	c := consoleClient(t)
	if code, page := fetch(t, c, http.MethodGet, ro+"deadletters", nil); code != http.StatusOK || strings.Contains(page, `type="checkbox"`) || !strings.Contains(page, "conflict") {
		t.Errorf("a read-only console's dead letters: %d\n%s", code, page)
	}
	if code, _ := fetch(t, c, http.MethodPost, ro+"deadletters-replay", url.Values{"queue": {"0"}, "reason": {"conflict"}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("a replay on a read-only console: %d, want 403", code)
	}
	if after, _ := list(); len(after) != want {
		t.Errorf("the read-only console replayed: %d dead letters, want %d", len(after), want)
	}
}

func TestConsoleBadBroker(t *testing.T) {
	cfg := consoleConfig{store: storeFlags{dsn: "memory://"}, broker: brokerFlags{url: "http://x"}, addr: "127.0.0.1:0"}
	var ue usageError
	if err := serveConsole(context.Background(), cfg, io.Discard, io.Discard, nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), "bad broker URL") {
		t.Errorf("--broker http://x: %v, want a usage error", err)
	}
}

// findRecord finds the record of id in any scope.
func findRecord(s idem.Store, id string) (idem.Record, error) {
	in, ok := s.(idem.Inspector)
	if !ok {
		return idem.Record{}, errors.New("the store lists no records")
	}
	recs, err := in.List(context.Background(), idem.ListFilter{Limit: 100})
	if err != nil {
		return idem.Record{}, err
	}
	for _, r := range recs {
		if r.ID == id {
			return r, nil
		}
	}
	return idem.Record{}, fmt.Errorf("no record of %s among %d", id, len(recs))
}
