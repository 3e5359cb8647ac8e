package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// Store is what the console reads and resolves: an idem.Store that
// operators can list and count (memory, sqlite, postgres, mysql and redis
// all are).
type Store interface {
	idem.Store
	idem.Inspector
}

// Operations an Action names.
const (
	OpComplete = "complete" // mark an in-progress record completed: its side effect happened
	OpRelease  = "release"  // give an in-progress record back: its side effect did not happen
	// OpSupersede accepts a conflict's dead-lettered content as the key's
	// truth (idem.Supersede): the record is released with the dead
	// letter's fingerprint, so its replay is processed once.
	OpSupersede = "supersede"
	OpSweep     = "sweep" // delete expired records now
	OpView      = "view"  // read a page: asked only of a console reachable by other hosts (Options.AllowedHosts)
)

// Action is what an operator asks the console to do, passed to
// Options.Authorize before it is done.
type Action struct {
	Op   string   // OpComplete, OpRelease, OpSupersede, OpSweep, OpOutboxRetry, OpDeadLetterReplay or OpView
	Key  idem.Key // the record; zero for OpSweep, OpOutboxRetry and OpDeadLetterReplay
	Seqs []int64  // OpOutboxRetry: the messages; empty for every parked one

	// OpDeadLetterReplay: the queue's Name, the dead letters' ids, and the
	// reason they were chosen by ("" when ticked one by one).
	Queue  string
	IDs    []string
	Reason string

	// Offer is true when a page asks whether to show the action's form:
	// nothing is taken, and the action is asked again, Offer false, when
	// the form is sent.
	Offer bool
}

// Options configure a Console. The zero value is a read-only console.
type Options struct {
	// Authorize decides whether the request may take the action, and
	// names who takes it: the name is logged with the action. Return an
	// error to refuse (its text is shown to the operator). Nil: the
	// console is read-only, shows no action and refuses every one. The
	// embedding server authenticates; this hook only decides.
	//
	// It is asked too when a page is drawn (Action.Offer set), with each
	// action the page's forms would take, so a viewer it refuses sees no
	// form, and the header says "actions enabled" only to a viewer it
	// allows to act (a page with no form asks for each operation the
	// console offers, with no key).
	Authorize func(r *http.Request, a Action) (who string, err error)

	// AllowedHosts are the Host header names the console answers besides
	// the loopback names (localhost, *.localhost, 127.0.0.0/8, ::1),
	// without port ("*.example.com" for its subdomains; AnyHost for every
	// name, when the server checks Host itself); others get 421. Default:
	// the loopback names only, so a
	// page on another site cannot read a loopback console by pointing its
	// own name at 127.0.0.1 (DNS rebinding). A console that names a host
	// other than loopback is served to others: every page then passes
	// Authorize too (Action OpView), and without Authorize every page is
	// refused, read-only included.
	AllowedHosts []string

	// ReadOnly offers and takes no action even with Authorize set: Authorize
	// is then asked only whether a page may be read (OpView), for a
	// read-only console served to other hosts.
	ReadOnly bool

	// Entities are entity-mode inboxes (package entity: the key in the
	// business row) shown on the Entities page: their recent keys with
	// the row's id and version, and their scopes' conflicts and stale
	// versions (from the Recorder and Prometheus). EntitySQL reads a table.
	Entities []EntityInbox

	// Outbox, when set, adds the outbox's page: its pending and parked
	// messages, the relay's lease and lag, and retrying parked messages.
	Outbox outbox.Inspector

	// DeadLetters are brokers' dead-letter queues, shown on the Dead
	// letters page: each one's dead letters with their reason and age, one
	// with idem's headers beside the stored record of its key, and replay
	// of one, a selection or all of a reason, each confirmed on a page of
	// its own, authorised (OpDeadLetterReplay) and logged with who. The
	// Conflicts page lists those of reason conflict.
	DeadLetters []DeadLetters

	// DeadLetterLimit is how many dead letters of a queue a page reads,
	// oldest first, and so the most one replay takes. Default 500.
	DeadLetterLimit int

	// Recorder feeds the charts of this process's own guards and the
	// recent conflicts, parked keys and dead letters it saw. Nil: the
	// console shows the fleet's sources alone (the store's activity,
	// Prometheus, the dead-letter queues).
	Recorder *Recorder

	// Prometheus is the base URL of a Prometheus server that scrapes the
	// fleet's idemprom endpoints ("http://prometheus:9090"): the overview
	// then charts every process's processed messages, duplicates,
	// conflicts, dead letters, held deliveries and stale records per
	// scope, read through its HTTP query API (query_range). Without it
	// the fleet charts come from the store alone (when the store is an
	// idem.ActivityCounter, as every store of this module is).
	Prometheus string

	// PrometheusClient makes the Prometheus requests (its authentication,
	// TLS). Default: a client with a 30s timeout.
	PrometheusClient *http.Client

	// FleetWindow and FleetStep are the fleet charts' span and bucket:
	// default the last hour by minute. The charts are read again at most
	// every CountsMaxAge.
	FleetWindow, FleetStep time.Duration

	// Logger receives one record per action taken or refused. Default
	// slog.Default().
	Logger *slog.Logger

	// Clock is the time records are judged at (stale, expired) and actions
	// are written with. Default time.Now.
	Clock func() time.Time

	// PageSize is how many records a list page shows. Default 50, at most
	// 500.
	PageSize int

	// CountsMaxAge is how old the counts by scope and state may be before
	// they are counted again (in the background, the old ones shown
	// meanwhile, marked with their time). Counting reads every record, so
	// a console must not count per view of a large store. Default 15s;
	// negative: count on every view.
	CountsMaxAge time.Duration

	// QueryTimeout bounds each store call a page or an action makes.
	// Default 30s.
	QueryTimeout time.Duration

	// Retention is the retention of records completed from the console.
	// Default idem.DefaultRetention: match the guards' Options.Retention.
	Retention time.Duration

	// SweepBatch is the batch size of a sweep started from the console.
	// Default 1000.
	SweepBatch int

	// Secret keys the forms' CSRF tokens. Default: random per process,
	// which is right for one instance; consoles behind one address on
	// several instances share a Secret of at least 32 random bytes.
	Secret []byte
}

// Console is the operator console: an http.Handler to mount in the
// application's server. It renders every page on the server; its links
// and forms are relative, so it works under any path ending in a slash,
// with or without http.StripPrefix.
type Console struct {
	st     Store
	opts   Options
	log    *slog.Logger
	clock  func() time.Time
	csrf   csrf
	hosts  hostList
	counts *counts
	fleet  *fleet
	pages  map[string]*template.Template
	h      http.Handler

	stop      context.CancelFunc
	closeOnce sync.Once
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the console for s.
func New(s Store, opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	switch {
	case opts.PageSize <= 0:
		opts.PageSize = 50
	case opts.PageSize > 500:
		opts.PageSize = 500
	}
	if opts.CountsMaxAge == 0 {
		opts.CountsMaxAge = 15 * time.Second
	}
	if opts.QueryTimeout <= 0 {
		opts.QueryTimeout = 30 * time.Second
	}
	if opts.Retention <= 0 {
		opts.Retention = idem.DefaultRetention
	}
	if opts.SweepBatch <= 0 {
		opts.SweepBatch = 1000
	}
	if opts.DeadLetterLimit <= 0 {
		opts.DeadLetterLimit = 500
	}
	base, stop := context.WithCancel(context.Background())
	c := &Console{st: s, opts: opts, log: opts.Logger, clock: opts.Clock, csrf: newCSRF(opts.Secret), stop: stop,
		hosts:  newHostList(opts.AllowedHosts),
		counts: &counts{in: s, maxAge: opts.CountsMaxAge, timeout: opts.QueryTimeout, clock: opts.Clock, base: base}}
	if opts.FleetStep < time.Second {
		opts.FleetStep = time.Minute
	}
	if opts.FleetWindow < opts.FleetStep {
		opts.FleetWindow = time.Hour
	}
	opts.FleetWindow = min(opts.FleetWindow, opts.FleetStep*idem.MaxActivityBuckets)
	c.opts = opts
	c.fleet = &fleet{window: opts.FleetWindow, step: opts.FleetStep.Truncate(time.Second), maxAge: opts.CountsMaxAge,
		timeout: opts.QueryTimeout, clock: opts.Clock, base: base}
	c.fleet.counter, _ = s.(idem.ActivityCounter)
	if opts.Prometheus != "" {
		c.fleet.prom, c.fleet.promErr = newPromClient(opts.Prometheus, opts.PrometheusClient)
	}
	if c.hosts.remote && opts.Authorize == nil {
		c.log.Error("idem console: Options.AllowedHosts names hosts other than loopback and there is no Options.Authorize: every page is refused")
	}
	c.pages = parsePages(c.funcs())
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.refuse(w, r, "", "cross-origin request refused", http.StatusForbidden)
	}))
	c.h = cop.Handler(http.HandlerFunc(c.route))
	return c
}

// Close ends a recount of the records, or a reading of the fleet's charts,
// in progress and waits for it. Pages served after Close count in the
// request.
func (c *Console) Close() error {
	c.closeOnce.Do(func() {
		c.stop()
		c.counts.mu.Lock() // a recount started before stop has been added to wg
		c.counts.mu.Unlock()
		c.counts.wg.Wait()
		c.fleet.mu.Lock() // a refresh started before stop has been added to wg
		c.fleet.mu.Unlock()
		c.fleet.wg.Wait()
	})
	return nil
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing a record holds may run as script, whatever a template does:
	// scripts come from the console's own files only, and no page may be
	// framed (clickjacking the action buttons).
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if !c.hosts.allows(r.Host) {
		c.log.LogAttrs(r.Context(), slog.LevelWarn, "idem console: request for another Host refused",
			slog.String("remote", r.RemoteAddr))
		refuseHost(w)
		return
	}
	c.h.ServeHTTP(w, r)
}

// route dispatches on the last element of the path, so the console works
// whatever path it is mounted under.
func (c *Console) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if i := strings.LastIndex(p, "/static/"); i >= 0 {
		c.static(w, r, p[i+len("/static/"):])
		return
	}
	name := p[strings.LastIndex(p, "/")+1:]
	rt, ok := routes[name]
	if !ok {
		c.render(w, r, http.StatusNotFound, "message.html", &page{Title: "Not found", Message: "No console page is called " + name + "."})
		return
	}
	// Actions are POSTs; pages never change anything.
	allowed := rt.post && r.Method == http.MethodPost || !rt.post && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	if !allowed {
		allow := "GET, HEAD"
		if rt.post {
			allow = http.MethodPost
		}
		w.Header().Set("Allow", allow)
		http.Error(w, "use "+allow, http.StatusMethodNotAllowed)
		return
	}
	if !rt.post && !c.mayView(w, r) {
		return
	}
	rt.serve(c, w, r)
}

type route struct {
	post  bool // an action, taken by POST; otherwise a page, read by GET
	serve func(c *Console, w http.ResponseWriter, r *http.Request)
}

var routes = map[string]route{
	"":                   {false, (*Console).overview},
	"records":            {false, (*Console).records},
	"inprogress":         {false, (*Console).inProgress},
	"parked":             {false, (*Console).parked},
	"conflicts":          {false, (*Console).conflicts},
	"record":             {false, (*Console).record},
	"outbox":             {false, (*Console).outboxPage},
	"entities":           {false, (*Console).entities},
	"deadletters":        {false, (*Console).deadLettersPage},
	"deadletter":         {false, (*Console).deadLetterPage},
	"resolve":            {true, (*Console).resolve},
	"sweep":              {true, (*Console).sweep},
	"outbox-retry":       {true, (*Console).outboxRetry},
	"deadletters-replay": {true, (*Console).replayDeadLetters},
}

func (c *Console) static(w http.ResponseWriter, r *http.Request, name string) {
	b, err := fs.ReadFile(staticFS, "static/"+name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "public, max-age=86400")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string          // the active navigation entry
	Actions  bool            // this viewer is shown the page's forms: Authorize allows one of its offers
	Can      map[string]bool // by Op, the page's offers Authorize allows this viewer
	Acting   bool            // this viewer may act: the header says actions enabled
	ReadOnly bool            // the console offers no action to anyone (no Authorize, or ReadOnly)
	Refusal  string          // why Authorize refuses this viewer the page's actions, in its words
	Outbox   bool            // the outbox page exists
	Entity   bool            // the entities page exists
	DLQ      bool            // the dead-letters page exists
	CSRF     string
	Flash    string // the outcome of the action just taken
	Error    string
	Message  string
	Now      time.Time
	Data     any

	offers []Action // the actions the page's forms would take
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	c.offer(r, p)
	p.Outbox = c.opts.Outbox != nil
	p.Entity = len(c.opts.Entities) > 0
	p.DLQ = len(c.opts.DeadLetters) > 0
	if p.Acting {
		// The cookie from the first page on, forms or not: a viewer who
		// may act has it before the page that offers the action.
		p.CSRF = c.csrf.token(w, r)
	}
	if p.Now.IsZero() {
		p.Now = c.clock()
	}
	if p.Flash == "" {
		p.Flash = c.flashOf(r)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		c.log.ErrorContext(r.Context(), "idem console: render", "page", name, "error", err)
		http.Error(w, "the console failed to render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// actions reports whether the console offers actions.
func (c *Console) actions() bool { return c.opts.Authorize != nil && !c.opts.ReadOnly }

func (c *Console) queryCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.opts.QueryTimeout)
}

func (c *Console) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, idem.ErrInvalidOptions) || errors.Is(err, idem.ErrInvalidKey) || errors.Is(err, idem.ErrNoKey) {
		status = http.StatusBadRequest
	}
	c.render(w, r, status, "message.html", &page{Title: "Store error", Error: what + ": " + err.Error()})
}
