package console

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemgo/idem"
)

// maxResultForm bounds the result an operator types when completing.
const maxResultForm = 64 << 10

// authorize runs the checks every action passes, in order: the console
// allows actions, the embedding server's hook allows this one, the form
// carries the browser's CSRF token. It answers the refusals itself. The
// hook comes before the token: a viewer it refuses is shown no form, so
// has no token, and is told the real reason rather than to reload a page
// that offers nothing.
func (c *Console) authorize(w http.ResponseWriter, r *http.Request, a Action) (who string, ok bool) {
	if !c.actions() {
		c.refuse(w, r, "", "this console is read-only: the server that mounts it supplies no authorisation hook, or asks for read-only",
			http.StatusForbidden, slog.String("op", a.Op))
		return "", false
	}
	a.Offer = false
	who, err := c.opts.Authorize(r, a)
	if err != nil {
		attrs := []slog.Attr{slog.String("op", a.Op), slog.String("scope", a.Key.Scope), slog.String("key", a.Key.ID)}
		if a.Queue != "" {
			attrs = append(attrs, slog.String("queue", a.Queue), slog.String("ids", strings.Join(a.IDs, ",")), slog.String("chosen_by_reason", a.Reason))
		}
		c.refuse(w, r, who, "not authorised: "+err.Error(), http.StatusForbidden, attrs...)
		return "", false
	}
	if !c.csrf.valid(r) {
		c.refuse(w, r, who, "the form's CSRF token is missing or wrong: reload the page and try again",
			http.StatusForbidden, slog.String("op", a.Op))
		return "", false
	}
	return who, true
}

// offer decides which of the page's actions its viewer is shown: those
// Authorize allows (asked with Offer set), so that no viewer sees a form
// the console would refuse. A page without forms asks for each operation
// the console offers, for the header's "actions enabled".
func (c *Console) offer(r *http.Request, p *page) {
	p.Actions, p.Acting, p.Can, p.Refusal = false, false, nil, ""
	p.ReadOnly = !c.actions()
	if p.ReadOnly {
		return
	}
	allowed := func(a Action) bool {
		a.Offer = true
		_, err := c.opts.Authorize(r, a)
		if err != nil && p.Refusal == "" {
			p.Refusal = err.Error()
		}
		return err == nil
	}
	for _, a := range p.offers {
		if allowed(a) {
			if p.Can == nil {
				p.Can = map[string]bool{}
			}
			p.Can[a.Op], p.Actions = true, true
		}
	}
	if len(p.offers) > 0 {
		p.Acting = p.Actions
		return
	}
	for _, a := range c.operations() {
		if allowed(a) {
			p.Acting = true
			return
		}
	}
}

// operations are the actions the console offers, one per operation (and
// queue), with no key: what a page without forms asks Authorize about.
func (c *Console) operations() []Action {
	ops := []Action{{Op: OpComplete}, {Op: OpRelease}, {Op: OpSupersede}, {Op: OpSweep}}
	if c.opts.Outbox != nil {
		ops = append(ops, Action{Op: OpOutboxRetry})
	}
	for _, q := range c.opts.DeadLetters {
		ops = append(ops, Action{Op: OpDeadLetterReplay, Queue: q.Name()})
	}
	return ops
}

// mayView lets a page be read: always on a loopback-only console; on one
// served to other hosts (Options.AllowedHosts), only when Authorize allows
// OpView. Actions are authorised each by its own operation.
func (c *Console) mayView(w http.ResponseWriter, r *http.Request) bool {
	if !c.hosts.remote {
		return true
	}
	if c.opts.Authorize == nil {
		c.refuse(w, r, "", "this console is served to other hosts (Options.AllowedHosts) and has no authorisation hook, so it shows nothing",
			http.StatusForbidden, slog.String("op", OpView))
		return false
	}
	who, err := c.opts.Authorize(r, Action{Op: OpView})
	if err != nil {
		c.refuse(w, r, who, "not authorised: "+err.Error(), http.StatusForbidden, slog.String("op", OpView))
		return false
	}
	return true
}

// parseForm reads the posted form, bounded.
func (c *Console) parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxResultForm+4096)
	if err := r.ParseForm(); err != nil {
		c.refuse(w, r, "", "unreadable form: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// refuse logs a refused request and answers it.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, who, why string, status int, attrs ...slog.Attr) {
	attrs = append(attrs, slog.String("who", who), slog.String("remote", r.RemoteAddr), slog.String("reason", why))
	c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: action refused", attrs...)
	c.render(w, r, status, "message.html", &page{Title: "Refused", Error: why})
}

// resolve completes or releases an in-progress record with the token the
// operator saw, so a record that changed since (taken over, completed by its
// owner) is never overwritten.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request) {
	if !c.parseForm(w, r) {
		return
	}
	op := r.PostFormValue("op")
	key := idem.Key{Scope: r.PostFormValue("scope"), ID: r.PostFormValue("id")}
	who, ok := c.authorize(w, r, Action{Op: op, Key: key})
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("op", op), slog.String("scope", key.Scope), slog.String("key", key.ID),
		slog.String("who", who), slog.String("remote", r.RemoteAddr)}
	fail := func(status int, msg string) {
		c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: action failed", append(attrs, slog.String("error", msg))...)
		c.render(w, r, status, "message.html", &page{Title: "Not resolved", Error: msg, Data: key})
	}
	if op != OpComplete && op != OpRelease && op != OpSupersede {
		fail(http.StatusBadRequest, fmt.Sprintf("unknown operation %q: complete, release or supersede", op))
		return
	}
	if err := key.Validate(); err != nil {
		fail(http.StatusBadRequest, "bad key: "+err.Error())
		return
	}
	token, err := strconv.ParseInt(r.PostFormValue("token"), 10, 64)
	if err != nil {
		fail(http.StatusBadRequest, "the form has no fencing token")
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	rec, err := c.st.Get(ctx, key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		fail(http.StatusConflict, "the record is gone (swept or expired): nothing to resolve")
		return
	case err != nil:
		fail(http.StatusBadGateway, "reading the record failed: "+err.Error())
		return
	case op == OpSupersede:
		c.supersede(w, r, rec, token, who, attrs, fail)
		return
	case rec.State != idem.StateInProgress:
		fail(http.StatusConflict, fmt.Sprintf("the record is %s now, not in progress: nothing to resolve", rec.State))
		return
	case rec.Token != token:
		fail(http.StatusConflict, fmt.Sprintf("the record changed since you looked (token %d, now %d): another owner holds it; look again and decide", token, rec.Token))
		return
	}
	now := c.clock()
	if op == OpComplete {
		result := []byte(r.PostFormValue("result"))
		err = c.st.Complete(ctx, idem.CompleteRequest{Key: key, Token: token, Result: result, Now: now, ExpiresAt: now.Add(c.opts.Retention)})
	} else {
		err = c.st.Release(ctx, idem.ReleaseRequest{Key: key, Token: token, Now: now})
	}
	if errors.Is(err, idem.ErrLeaseLost) {
		fail(http.StatusConflict, fmt.Sprintf("the record changed while resolving (token %d no longer holds it); look again and decide", token))
		return
	}
	if err != nil {
		fail(http.StatusBadGateway, op+" failed: "+err.Error())
		return
	}
	c.counts.forget()
	attrs = append(attrs, slog.Int64("token", token))
	c.log.LogAttrs(r.Context(), slog.LevelInfo, "idem console: record "+op+"d", attrs...)
	done := "completed"
	if op == OpRelease {
		done = "released"
	}
	http.Redirect(w, r, recordURL(key)+"&"+c.flash(fmt.Sprintf("Record %s by %s (token %d).", done, who, token)), http.StatusSeeOther)
}

// supersede makes the posted fingerprint (a conflict's dead-lettered
// content) the content of rec, read with the token the operator saw,
// once the operator confirmed it; logged with who.
func (c *Console) supersede(w http.ResponseWriter, r *http.Request, rec idem.Record, token int64, who string, attrs []slog.Attr, fail func(int, string)) {
	fp := r.PostFormValue("fingerprint")
	switch {
	case r.PostFormValue("confirm") != "yes":
		fail(http.StatusBadRequest, "not confirmed: tick the box that says this content is the key's truth")
		return
	case fp == "":
		fail(http.StatusBadRequest, "the form has no fingerprint")
		return
	case rec.Token != token:
		fail(http.StatusConflict, fmt.Sprintf("the record changed since you looked (token %d, now %d): look again and decide", token, rec.Token))
		return
	case rec.State == idem.StateInProgress:
		fail(http.StatusConflict, "the record is in progress: an owner may be running; resolve it first (complete or release)")
		return
	case rec.Fingerprint == fp:
		fail(http.StatusConflict, "the record holds this content already: nothing to supersede (replay the dead letter as it is)")
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	err := idem.Supersede(ctx, c.st, idem.SupersedeRequest{Key: rec.Key(), Token: token, Fingerprint: fp, Now: c.clock()})
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		fail(http.StatusConflict, fmt.Sprintf("the record changed while superseding (token %d no longer holds it); look again and decide", token))
		return
	case err != nil:
		fail(http.StatusBadGateway, "supersede failed: "+err.Error())
		return
	}
	c.counts.forget()
	attrs = append(attrs, slog.Int64("token", token), slog.String("from", rec.Fingerprint), slog.String("to", fp))
	c.log.LogAttrs(r.Context(), slog.LevelInfo, "idem console: record superseded", attrs...)
	http.Redirect(w, r, recordURL(rec.Key())+"&"+c.flash(fmt.Sprintf(
		"Content %s superseded %s by %s (token %d): replay the dead letter to process it once; the old content is a conflict from now on.",
		fp, rec.Fingerprint, who, token)), http.StatusSeeOther)
}

// sweep deletes expired records now, batch by batch.
func (c *Console) sweep(w http.ResponseWriter, r *http.Request) {
	if !c.parseForm(w, r) {
		return
	}
	who, ok := c.authorize(w, r, Action{Op: OpSweep})
	if !ok {
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	sw := idem.Sweeper{Store: c.st, BatchSize: c.opts.SweepBatch, Clock: c.clock}
	n, err := sw.SweepOnce(ctx)
	attrs := []slog.Attr{slog.String("op", OpSweep), slog.Int("deleted", n), slog.String("who", who), slog.String("remote", r.RemoteAddr)}
	if n > 0 {
		c.counts.forget()
	}
	if err != nil {
		c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: action failed", append(attrs, slog.String("error", err.Error()))...)
		c.render(w, r, http.StatusBadGateway, "message.html", &page{Title: "Sweep failed",
			Error: fmt.Sprintf("the sweep failed after deleting %d records: %v", n, err)})
		return
	}
	c.log.LogAttrs(r.Context(), slog.LevelInfo, "idem console: swept", attrs...)
	http.Redirect(w, r, "./?"+c.flash(fmt.Sprintf("Swept %d expired record%s (%s).", n, plural(n), who)), http.StatusSeeOther)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// flash encodes the message a redirect shows on the next page, signed so
// that a link from elsewhere cannot make the console claim an action.
func (c *Console) flash(msg string) string {
	return url.Values{"done": {msg}, "sig": {c.csrf.sign("flash\x00" + msg)}}.Encode()
}

// flashOf returns the request's flash message when its signature holds.
func (c *Console) flashOf(r *http.Request) string {
	q := r.URL.Query()
	msg, sig := q.Get("done"), q.Get("sig")
	if msg == "" || subtle.ConstantTimeCompare([]byte(sig), []byte(c.csrf.sign("flash\x00"+msg))) != 1 {
		return ""
	}
	return msg
}
