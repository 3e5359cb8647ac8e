package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// OpDeadLetterReplay replays dead letters through their broker adapter's
// Replay: Action.Queue names the queue, Action.IDs the dead letters, and
// Action.Reason the reason the operator chose them by ("" when picked one
// by one). Authorize is asked twice: for the confirmation page, with the
// IDs or the Reason asked for, and for the replay, with the IDs shown
// (and, Action.Offer set, whenever a page would show a replay form).
const OpDeadLetterReplay = "dead_letter_replay"

// DeadLetters is one broker's dead letters as the console reads and
// replays them: a NATS dead-letter stream, a RabbitMQ dead-letter queue, a
// Kafka dead-letter topic, a Service Bus $DeadLetterQueue. The console
// imports no broker; `idem console --broker URL` gives it the same queues
// `idem dlq` reads, and an application can give its own.
type DeadLetters interface {
	// Name says which broker and dead-letter entity, without secrets.
	Name() string
	// List returns up to limit dead letters (all when limit <= 0), oldest
	// first, leaving each where it is.
	List(ctx context.Context, limit int) ([]BrokerDeadLetter, error)
	// Replay replays the dead letters named by ids through the adapter's
	// Replay, each once, and removes each replayed one where the broker
	// can; done is called for each dead letter met, with its error. Ids not
	// met (replayed or removed meanwhile) are not reported.
	Replay(ctx context.Context, ids []string, done func(BrokerDeadLetter, error)) error
}

// BrokerDeadLetter is one dead letter as its broker holds it, with idem's
// dead-letter headers read out (idem.HeaderReason, idem.HeaderError,
// idem.HeaderDeadLetterKey, idem.HeaderFingerprint). DeadLetter, by
// contrast, is one a Recorder saw this process write. Every field comes
// from producers and brokers and is shown as text.
type BrokerDeadLetter struct {
	ID          string            // names it for Replay: a stream sequence, a Kafka "partition/offset", ...
	Reason      string            // Idem-Reason (conflict, permanent, max_deliver, parked, ...) or the broker's own
	Error       string            // Idem-Error
	Key         string            // Idem-Key: the message's "scope/id"; "" when it had none
	Fingerprint string            // Idem-Fingerprint: this message's content fingerprint
	Source      string            // where the original came from: subject, queue, topic or entity
	At          time.Time         // when the broker stored it (or the original); zero when it does not say
	Headers     map[string]string // every header, as text
	Body        []byte
}

// Keys lists every (scope, id) split of Key at a slash, the first slash
// first: a scope can hold a slash itself (NATS's "STREAM/consumer"), so
// the record is found under one of them.
func (d BrokerDeadLetter) Keys() []idem.Key {
	var out []idem.Key
	for i := 1; i < len(d.Key)-1; i++ {
		if d.Key[i] == '/' {
			out = append(out, idem.Key{Scope: d.Key[:i], ID: d.Key[i+1:]})
		}
	}
	return out
}

// queueRef is a queue the request names by its place in
// Options.DeadLetters.
type queueRef struct {
	n int
	q DeadLetters
}

func (c *Console) queueOf(w http.ResponseWriter, r *http.Request, v string) (queueRef, bool) {
	if len(c.opts.DeadLetters) == 0 {
		c.render(w, r, http.StatusNotFound, "message.html", &page{Title: "Dead letters",
			Message: "No dead-letter queue: the server that mounts the console passes no Options.DeadLetters (idem console: --broker URL)."})
		return queueRef{}, false
	}
	n := 0
	if v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 || n >= len(c.opts.DeadLetters) {
			c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: "Dead letters",
				Error: fmt.Sprintf("no dead-letter queue %q: the console has %d", v, len(c.opts.DeadLetters))})
			return queueRef{}, false
		}
	}
	return queueRef{n, c.opts.DeadLetters[n]}, true
}

// reasonCount is one reason of a queue's list with how many dead letters
// have it.
type reasonCount struct {
	Reason string
	N      int
}

// deadLettersData is the list page of one queue.
type deadLettersData struct {
	Queues  []string // every queue's name, for the tabs
	Queue   int
	Name    string
	Reason  string // the filter; "" for all
	Reasons []reasonCount
	Total   int // read, before the filter
	Letters []BrokerDeadLetter
	Cut     bool // the queue holds more than Limit
	Limit   int
}

func (c *Console) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref, ok := c.queueOf(w, r, q.Get("queue"))
	if !ok {
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	dls, cut, err := c.listDeadLetters(ctx, ref.q)
	if err != nil {
		c.listFailed(w, r, "Dead letters", ref.q, err)
		return
	}
	d := &deadLettersData{Queue: ref.n, Name: ref.q.Name(), Reason: q.Get("reason"), Total: len(dls), Cut: cut, Limit: c.opts.DeadLetterLimit}
	for _, x := range c.opts.DeadLetters {
		d.Queues = append(d.Queues, x.Name())
	}
	counts := map[string]int{}
	for _, dl := range dls {
		counts[dl.Reason]++
		if d.Reason == "" || dl.Reason == d.Reason {
			d.Letters = append(d.Letters, dl)
		}
	}
	for reason, n := range counts {
		d.Reasons = append(d.Reasons, reasonCount{reason, n})
	}
	sort.Slice(d.Reasons, func(i, j int) bool { return d.Reasons[i].Reason < d.Reasons[j].Reason })
	c.render(w, r, http.StatusOK, "deadletters.html", &page{Title: "Dead letters", Nav: "deadletters", Data: d,
		offers: []Action{{Op: OpDeadLetterReplay, Queue: d.Name}}})
}

// listFailed answers a request whose List of q failed.
func (c *Console) listFailed(w http.ResponseWriter, r *http.Request, title string, q DeadLetters, err error) {
	c.render(w, r, http.StatusBadGateway, "message.html", &page{Title: title, Nav: "deadletters",
		Error: "listing " + q.Name() + " failed: " + err.Error()})
}

// listDeadLetters reads the oldest DeadLetterLimit dead letters of q, and
// says whether there are more.
func (c *Console) listDeadLetters(ctx context.Context, q DeadLetters) ([]BrokerDeadLetter, bool, error) {
	dls, err := q.List(ctx, c.opts.DeadLetterLimit+1)
	if err != nil {
		return nil, false, err
	}
	if len(dls) > c.opts.DeadLetterLimit {
		return dls[:c.opts.DeadLetterLimit], true, nil
	}
	return dls, false, nil
}

// deadLetterData is one dead letter's page: its headers beside the
// stored record of its key.
type deadLetterData struct {
	Queue     int
	Name      string
	Letter    BrokerDeadLetter
	Idem      []header // idem's headers (Idem-*, x-idem-*)
	Others    []header
	Record    *idem.Record // nil: none found
	RecordErr string
	Verdict   verdict
	// Kept is the copy of the content holding the key, where its guard
	// kept one (idem.Options.KeepPayload); KeptCut: only its first bytes.
	Kept    []byte
	KeptCut bool
	// Supersede: the dead letter's content conflicts with a settled
	// record, which an operator may make it replace (OpSupersede).
	Supersede bool
}

type header struct{ Name, Value string }

// verdict says which content holds the dead letter's key, and so what a
// replay does.
type verdict struct {
	Code string // same, other, none, nokey, nofp, expired: for tests and styling
	Text string
}

func (c *Console) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref, ok := c.queueOf(w, r, q.Get("queue"))
	if !ok {
		return
	}
	id := q.Get("id")
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	dls, _, err := c.listDeadLetters(ctx, ref.q)
	if err != nil {
		c.listFailed(w, r, "Dead letter", ref.q, err)
		return
	}
	var dl *BrokerDeadLetter
	for i := range dls {
		if dls[i].ID == id {
			dl = &dls[i]
			break
		}
	}
	if dl == nil {
		c.render(w, r, http.StatusNotFound, "message.html", &page{Title: "Dead letter", Nav: "deadletters",
			Message: fmt.Sprintf("No dead letter %q among the oldest %d of %s: replayed or removed since, or never there.", id, c.opts.DeadLetterLimit, ref.q.Name())})
		return
	}
	now := c.clock()
	d := &deadLetterData{Queue: ref.n, Name: ref.q.Name(), Letter: *dl}
	for k, v := range dl.Headers {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "idem-") || strings.HasPrefix(lk, "x-idem-") {
			d.Idem = append(d.Idem, header{k, v})
		} else {
			d.Others = append(d.Others, header{k, v})
		}
	}
	for _, hs := range [][]header{d.Idem, d.Others} {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })
	}
	l := c.recordOf(ctx, *dl)
	d.Record, d.RecordErr = l.rec, l.err
	d.Verdict = judge(*dl, d.Record, now)
	offers := []Action{{Op: OpDeadLetterReplay, Queue: d.Name, IDs: []string{dl.ID}}}
	if rec := d.Record; rec != nil {
		if p, cut, err := idem.KeptPayload(ctx, c.st, rec.Key(), rec.Fingerprint); err == nil {
			d.Kept, d.KeptCut = p, cut
		}
		if d.Verdict.Code == "other" && rec.State != idem.StateInProgress && dl.Fingerprint != "" {
			d.Supersede = true
			offers = append(offers, Action{Op: OpSupersede, Key: rec.Key()})
		}
	}
	c.render(w, r, http.StatusOK, "deadletter.html", &page{Title: "Dead letter", Nav: "deadletters", Now: now, Data: d, offers: offers})
}

// judge compares the dead letter's fingerprint with the stored record's.
func judge(dl BrokerDeadLetter, rec *idem.Record, now time.Time) verdict {
	switch {
	case dl.Key == "":
		return verdict{"nokey", "The message had no key, so no record holds it; a replay meets the same key extraction again."}
	case rec == nil:
		return verdict{"none", "No record holds the key (never claimed, or swept after its retention): a replay processes the message."}
	case rec.Expired(now):
		return verdict{"expired", "The key's record expired (awaiting a sweep): a replay processes the message as new."}
	case dl.Fingerprint == "" || rec.Fingerprint == "":
		return verdict{"nofp", "No fingerprint on one side: the content cannot be compared."}
	case dl.Fingerprint != rec.Fingerprint:
		return verdict{"other", "Other content holds the key: a replay is dead-lettered again as a conflict."}
	case rec.State == idem.StateCompleted:
		return verdict{"same", "This content holds the key, completed: a replay is a duplicate, acknowledged without running the handler."}
	}
	return verdict{"same", fmt.Sprintf("This content holds the key, %s: a replay processes it once the record lets it.", strings.ReplaceAll(string(rec.State), "_", " "))}
}

// replayData is the confirmation page of a replay.
type replayData struct {
	Queue   int
	Name    string
	Reason  string
	Letters []BrokerDeadLetter
	Missing []string
	Cut     bool
	Limit   int
}

// replayDeadLetters takes a replay in two POSTs: the first (from the list
// or a dead letter's page) shows what will be replayed, the second
// (confirm=yes, from that page) replays exactly the ids shown.
func (c *Console) replayDeadLetters(w http.ResponseWriter, r *http.Request) {
	if !c.parseForm(w, r) {
		return
	}
	ref, ok := c.queueOf(w, r, r.PostFormValue("queue"))
	if !ok {
		return
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		if id != "" && !seen[id] { // as the queue names it: a RabbitMQ consumer tag may hold spaces
			seen[id] = true
			ids = append(ids, id)
		}
	}
	reason, confirmed := r.PostFormValue("reason"), r.PostFormValue("confirm") == "yes"
	name := ref.q.Name()
	who, ok := c.authorize(w, r, Action{Op: OpDeadLetterReplay, Queue: name, IDs: ids, Reason: reason})
	if !ok {
		return
	}
	bad := func(msg string) {
		c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: "Replay", Nav: "deadletters", Error: msg})
	}
	switch {
	case len(ids) == 0 && (confirmed || reason == ""):
		bad("choose the dead letters to replay: tick them, or replay all of a reason")
		return
	case len(ids) > c.opts.DeadLetterLimit:
		bad(fmt.Sprintf("%d dead letters chosen: at most %d at once", len(ids), c.opts.DeadLetterLimit))
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	if !confirmed {
		c.confirmReplay(ctx, w, r, ref, ids, reason)
		return
	}
	attrs := []slog.Attr{slog.String("op", OpDeadLetterReplay), slog.String("queue", name), slog.String("who", who), slog.String("remote", r.RemoteAddr)}
	if reason != "" {
		attrs = append(attrs, slog.String("chosen_by_reason", reason))
	}
	var (
		mu       sync.Mutex // a queue may report from several goroutines
		replayed int
		failed   []string
		met      = map[string]bool{}
	)
	err := ref.q.Replay(ctx, ids, func(dl BrokerDeadLetter, err error) {
		mu.Lock()
		defer mu.Unlock()
		met[dl.ID] = true
		a := append(attrs[:len(attrs):len(attrs)], slog.String("id", dl.ID), slog.String("reason", dl.Reason), slog.String("key", dl.Key))
		if err != nil {
			failed = append(failed, dl.ID+": "+err.Error())
			c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: dead-letter replay failed", append(a, slog.String("error", err.Error()))...)
			return
		}
		replayed++
		c.log.LogAttrs(r.Context(), slog.LevelInfo, "idem console: dead letter replayed", a...)
	})
	var gone []string
	for _, id := range ids {
		if !met[id] {
			gone = append(gone, id)
		}
	}
	msg := fmt.Sprintf("Replayed %d of %d dead letter%s from %s (%s).", replayed, len(ids), plural(len(ids)), name, who)
	if err == nil && len(failed) == 0 && len(gone) == 0 {
		http.Redirect(w, r, deadLettersURL(ref.n, "")+"&"+c.flash(msg), http.StatusSeeOther)
		return
	}
	var problems []string
	if err != nil {
		problems = append(problems, "the replay stopped: "+err.Error())
		c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: dead-letter replay stopped",
			append(attrs, slog.Int("replayed", replayed), slog.String("error", err.Error()))...)
	}
	if len(failed) > 0 {
		problems = append(problems, "failed: "+strings.Join(failed, "; "))
	}
	if len(gone) > 0 {
		problems = append(problems, "gone before the replay (replayed or removed meanwhile): "+strings.Join(gone, ", "))
	}
	status := http.StatusOK
	if err != nil || len(failed) > 0 {
		status = http.StatusBadGateway
	}
	c.render(w, r, status, "message.html", &page{Title: "Replay", Nav: "deadletters", Message: msg, Error: strings.Join(problems, " · ")})
}

// confirmReplay shows the dead letters a replay would take: those named,
// or every one of the reason among the oldest DeadLetterLimit.
func (c *Console) confirmReplay(ctx context.Context, w http.ResponseWriter, r *http.Request, ref queueRef, ids []string, reason string) {
	dls, cut, err := c.listDeadLetters(ctx, ref.q)
	if err != nil {
		c.listFailed(w, r, "Replay", ref.q, err)
		return
	}
	d := &replayData{Queue: ref.n, Name: ref.q.Name(), Reason: reason, Limit: c.opts.DeadLetterLimit}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for _, dl := range dls {
		if want[dl.ID] || len(ids) == 0 && dl.Reason == reason {
			d.Letters = append(d.Letters, dl)
			delete(want, dl.ID)
		}
	}
	for _, id := range ids {
		if want[id] {
			d.Missing = append(d.Missing, id)
		}
	}
	d.Cut = cut && len(ids) == 0
	shown := make([]string, len(d.Letters))
	for i, dl := range d.Letters {
		shown[i] = dl.ID
	}
	c.render(w, r, http.StatusOK, "replay.html", &page{Title: "Replay dead letters?", Nav: "deadletters", Data: d,
		offers: []Action{{Op: OpDeadLetterReplay, Queue: d.Name, IDs: shown, Reason: reason}}})
}

// deadLetterURL links a dead letter's page.
func deadLetterURL(queue int, id string) string {
	return "deadletter?" + url.Values{"queue": {strconv.Itoa(queue)}, "id": {id}}.Encode()
}

// deadLettersURL links a queue's list, filtered by reason when given.
func deadLettersURL(queue int, reason string) string {
	v := url.Values{"queue": {strconv.Itoa(queue)}}
	if reason != "" {
		v.Set("reason", reason)
	}
	return "deadletters?" + v.Encode()
}
