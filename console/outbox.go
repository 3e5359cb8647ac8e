package console

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem/outbox"
)

// OpOutboxRetry makes parked outbox messages pending again (Action.Seqs,
// or every parked message when it is empty).
const OpOutboxRetry = "outbox_retry"

// outboxData is the outbox page: its counts, the relay lease, a page of
// pending or parked messages.
type outboxData struct {
	Stats    outbox.Stats
	Lag      time.Duration
	LeaseOK  bool // the lease is held now
	State    outbox.State
	Records  []outbox.Record
	Next     int64 // AfterSeq of the next page; 0 on the last
	First    bool
	StatsErr string
}

func (c *Console) outboxPage(w http.ResponseWriter, r *http.Request) {
	if c.opts.Outbox == nil {
		c.render(w, r, http.StatusNotFound, "message.html", &page{Title: "Outbox",
			Message: "No outbox: the server that mounts the console passes no Options.Outbox."})
		return
	}
	q := r.URL.Query()
	state := outbox.State(q.Get("state"))
	switch state {
	case "":
		state = outbox.StateParked
	case outbox.StateParked, outbox.StatePending:
	default:
		c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: "Outbox", Error: "unknown state " + string(state) + ": pending or parked"})
		return
	}
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	now := c.clock()
	d := &outboxData{State: state, First: after == 0}
	st, err := c.opts.Outbox.Stats(ctx, now)
	if err != nil {
		d.StatsErr = err.Error()
	} else {
		d.Stats, d.Lag, d.LeaseOK = st, st.Lag(now), st.Lease.Owner != "" && now.Before(st.Lease.Until)
	}
	recs, err := c.opts.Outbox.List(ctx, outbox.ListFilter{State: state, AfterSeq: after, Limit: c.opts.PageSize + 1})
	if err != nil {
		c.storeError(w, r, "listing the outbox failed", err)
		return
	}
	if len(recs) > c.opts.PageSize {
		recs = recs[:c.opts.PageSize]
		d.Next = recs[len(recs)-1].Seq
	}
	d.Records = recs
	p := &page{Title: "Outbox", Nav: "outbox", Now: now, Data: d}
	if state == outbox.StateParked && len(recs) > 0 {
		p.offers = []Action{{Op: OpOutboxRetry}}
	}
	c.render(w, r, http.StatusOK, "outbox.html", p)
}

// outboxRetry makes parked messages pending again.
func (c *Console) outboxRetry(w http.ResponseWriter, r *http.Request) {
	if !c.parseForm(w, r) {
		return
	}
	if c.opts.Outbox == nil {
		http.NotFound(w, r)
		return
	}
	var seqs []int64
	for _, s := range r.PostForm["seq"] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: "Outbox", Error: fmt.Sprintf("bad sequence number %q", s)})
			return
		}
		seqs = append(seqs, n)
	}
	if len(seqs) == 0 && r.PostFormValue("all") != "parked" {
		c.render(w, r, http.StatusBadRequest, "message.html", &page{Title: "Outbox", Error: "name the messages to retry, or all parked ones"})
		return
	}
	who, ok := c.authorize(w, r, Action{Op: OpOutboxRetry, Seqs: seqs})
	if !ok {
		return
	}
	ctx, cancel := c.queryCtx(r)
	defer cancel()
	n, err := c.opts.Outbox.Retry(ctx, outbox.RetryRequest{Seqs: seqs, Now: c.clock()})
	attrs := []slog.Attr{slog.String("op", OpOutboxRetry), slog.String("seqs", seqList(seqs)), slog.Int("retried", n),
		slog.String("who", who), slog.String("remote", r.RemoteAddr)}
	if err != nil {
		c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: action failed", append(attrs, slog.String("error", err.Error()))...)
		c.storeError(w, r, "retrying the outbox messages failed", err)
		return
	}
	c.log.LogAttrs(r.Context(), slog.LevelInfo, "idem console: outbox messages retried", attrs...)
	http.Redirect(w, r, "outbox?"+c.flash(fmt.Sprintf("%d parked message%s made pending again by %s.", n, plural(n), who)), http.StatusSeeOther)
}

func seqList(seqs []int64) string {
	if len(seqs) == 0 {
		return "all parked"
	}
	s := make([]string, len(seqs))
	for i, n := range seqs {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, ",")
}
