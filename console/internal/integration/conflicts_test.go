package integration_test

import (
	"context"
	"errors"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
)

// conflictRowRE is one row of a queue's conflicts: its dead letter's id,
// the key's link, the fingerprints, the stored state and the record now.
var conflictRowRE = regexp.MustCompile(`(?s)<tr data-id="([^"]*)">.*?<td class="key">(.*?)</td>.*?<td class="mono" data-fp[^>]*>([^<]*)</td>.*?` +
	`<td class="mono" data-stored-fp[^>]*>([^<]*)</td>.*?<td data-stored-state>([^<]*)</td>.*?</tr>`)

// jargon is what a developer reads and an operator should not: the
// console's option and type names.
var jargon = []string{"Recorder", "Options.", "OnDeadLetter", "Observer", "mounts the console"}

// With dead-letter queues, the Conflicts page lists the dead letters of
// reason conflict and no other: each with its key linked to its record's
// page, the message's fingerprint, the recorded one and the stored state
// its headers carry, the record now, and a link to the dead letter. A
// queue that cannot be read says so.
func TestConflictsFromDeadLetters(t *testing.T) {
	f, q := dlqFixture(t, nil)
	c := f.client(t)
	code, body := get(t, c, f.base+"conflicts")
	if code != http.StatusOK {
		t.Fatalf("conflicts: %d\n%s", code, body)
	}
	rows := map[string][]string{}
	for _, m := range conflictRowRE.FindAllStringSubmatch(body, -1) {
		rows[html.UnescapeString(m[1])] = m[2:]
	}
	if len(rows) != 2 || rows["1"] == nil || rows["4"] == nil {
		t.Fatalf("the page lists %v, want the conflicts 1 and 4 alone\n%s", rows, body)
	}
	one := rows["1"]
	if !strings.Contains(one[0], `href="`+html.EscapeString(recordPage(f, idem.Key{Scope: "billing", ID: "order-001"})[len(f.base):])+`"`) ||
		!strings.Contains(one[0], "billing/order-001") || one[1] != "fp-other" || one[2] != "fp-order-001" || one[3] != "completed" {
		t.Errorf("conflict 1: %q; want its key linked to order-001's record, fp-other beside fp-order-001, completed", one)
	}
	if !strings.Contains(body, `href="`+html.EscapeString(dlPage(f, "1")[len(f.base):])+`"`) {
		t.Error("the conflict does not link its dead letter's page")
	}
	for _, j := range jargon {
		if strings.Contains(body, j) {
			t.Errorf("the page speaks of %s to an operator", j)
		}
	}

	// A hostile conflict: its key, fingerprints and stored state are text.
	q.mu.Lock()
	q.dls = append(q.dls, console.BrokerDeadLetter{ID: "x", Reason: "conflict", Key: f.sd.xss.Scope + "/" + f.sd.xss.ID, Fingerprint: xssDLHeader,
		Headers: map[string]string{idem.HeaderStoredFingerprint: xssDLBody, "idem-stored-state": xssDLReason}})
	q.mu.Unlock()
	_, body = get(t, c, f.base+"conflicts")
	for _, bad := range []string{"<script>window", `id="pwned"`, "<img", "<svg id", "<b id", "<i id", `onerror="`, `onload="`} {
		if strings.Contains(body, bad) {
			t.Errorf("the hostile conflict: the page contains %q unescaped", bad)
		}
	}
	hostile := conflictRowRE.FindAllStringSubmatch(body, -1)
	if len(hostile) != 3 || !strings.Contains(html.UnescapeString(hostile[2][2]), `href="`+recordPage(f, f.sd.xss)[len(f.base):]+`"`) ||
		html.UnescapeString(hostile[2][5]) != xssDLReason {
		t.Errorf("the hostile conflict is not shown, linked to its record, with the stored state its headers say (in any case): %q", hostile)
	}

	q.mu.Lock()
	q.listErr = errors.New("nats: connection closed")
	q.mu.Unlock()
	if code, body := get(t, c, f.base+"conflicts"); code != http.StatusOK || !strings.Contains(body, "failed: nats: connection closed") {
		t.Errorf("conflicts with the queue down: %d\n%s", code, body)
	}
}

// Without a dead-letter queue or a Recorder, the page says in an
// operator's words where conflicts are and how to read them; with a
// Recorder it shows what this process saw.
func TestConflictsWithoutQueues(t *testing.T) {
	f := newFixture(t, stores[0].open(t), nil, nil)
	_, body := get(t, f.client(t), f.base+"conflicts")
	for _, want := range []string{"Conflicts are dead-lettered", "--broker URL", "idem dlq list --reason conflict"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
	for _, j := range jargon {
		if strings.Contains(body, j) {
			t.Errorf("the page speaks of %s to an operator:\n%s", j, body)
		}
	}

	rec := console.NewRecorder(console.RecorderOptions{})
	g := newFixture(t, stores[0].open(t), nil, rec)
	k := idem.Key{Scope: "billing", ID: "order-001"}
	rec.Observe(context.Background(), idem.Event{Key: k, Outcome: idem.OutcomeConflict,
		Err: &idem.ConflictError{Key: k, Fingerprint: "fp-other", Record: idem.Record{Fingerprint: "fp-order-001"}}})
	_, body = get(t, g.client(t), g.base+"conflicts")
	if !strings.Contains(body, "What this process observed") || !strings.Contains(body, "order-001") || strings.Contains(body, "Conflicts are dead-lettered:") {
		t.Errorf("the page with a Recorder:\n%s", body)
	}
}
