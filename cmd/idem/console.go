package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/idemprom"
)

func newConsoleCmd() *cobra.Command {
	var cfg consoleConfig
	c := &cobra.Command{
		Use:   "console",
		Short: "Serve the operator console in the browser: counts, stale and parked records, dead letters; resolve, sweep, replay",
		Long: `console serves idem's operator console for one store at --addr: the scopes
with their records counted by state, the records of a scope page by page, the
in-progress records with the stale ones marked, one record with its result,
and a Prometheus endpoint of the record gauges at /metrics.

With --broker URL (the forms below, as 'idem dlq' takes them) it shows that
broker's dead letters too: each one's reason and age, filtered by reason;
one dead letter with idem's headers beside the stored record of its key
(which content holds the key); the conflicts among them on the Conflicts
page, each with both fingerprints and a link to its key's record; and,
with --actions, replays one, a ticked selection or every one of a reason
through the adapter's Replay, each after a confirmation page, logged with
who replayed. Each page of them reads the queue (on RabbitMQ it gets and
puts back its messages).

It answers only requests whose Host header is a loopback name (localhost,
127.0.0.1, ::1) or one given with --allow-host, so a web page cannot read it
by pointing a name of its own at this machine (DNS rebinding).

On a loopback --addr it needs no login. Any other address (0.0.0.0:8080,
a LAN address) serves every record and result to whoever reaches it, so
it needs --auth, read-only too, and --allow-host with the names clients use:
  --auth basic   HTTP basic authentication for every page and /metrics:
                 user $IDEM_CONSOLE_USER (default operator), password
                 $IDEM_CONSOLE_PASSWORD (printed once when unset).
  --auth token   a bearer token ($IDEM_CONSOLE_TOKEN, printed once when
                 unset) in "Authorization: Bearer TOKEN" for scripts and
                 /metrics; browsers sign in with a one-time login link.
Plain HTTP carries these in clear: beyond a trusted network, serve it
behind a TLS proxy. /metrics takes the same authentication unless
--open-metrics is given.

It is read-only unless --actions is given. With --actions (without --auth
basic) it prints a one-time login link: the first browser that opens it
may complete or release records, sweep and replay dead letters; the link
is then spent, for that browser and every other. Other browsers are shown
no action, and read why. With --auth token, another link is printed
by: curl -X POST -H "Authorization: Bearer TOKEN" http://ADDR/login.
Every action is logged on stderr with the operator's name.

Its charts are the fleet's: the records every consumer process writes to
the store, counted over time per scope (claimed, completed, released,
retried), and with --prometheus the guards' own counts from Prometheus's
query API (processed, duplicates, conflicts, dead letters, held, stale),
summed over every process it scrapes.

Applications mount the same console in their own server, with charts from
their guards' observer too: see the console package.`,
		Example: `  idem console --store sqlite://idem.db
  idem console --store postgres://localhost/app --addr 127.0.0.1:9090
  IDEM_STORE=redis://localhost:6379 idem console --actions
  idem console --store postgres://db/app --prometheus http://prometheus:9090
  idem console --store postgres://db/app --broker 'nats://127.0.0.1:4222?dlq=ORDERS_DLQ' --actions
  idem console --store postgres://db/app --addr 0.0.0.0:8080 --allow-host idem.internal --auth token`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return serveConsole(c.Context(), cfg, c.OutOrStdout(), c.ErrOrStderr(), nil)
		},
	}
	fl := c.Flags()
	fl.StringVar(&cfg.store.dsn, "store", "", "store DSN (default $IDEM_STORE): "+dsnHelp+"; every form is listed above")
	fl.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fl.BoolVar(&cfg.actions, "actions", false, "allow resolving, sweeping and replaying dead letters (from the browser that opens the one-time login link, or any authenticated client)")
	fl.StringVar(&cfg.auth, "auth", "none", "authentication: none (loopback --addr only), basic or token")
	fl.StringSliceVar(&cfg.allowHosts, "allow-host", nil, "a Host name the console answers besides loopback ones (repeatable; *.example.com for subdomains; '*' behind a proxy that checks Host)")
	fl.StringVar(&cfg.prometheus, "prometheus", "", "base URL of a Prometheus that scrapes the fleet's idemprom endpoints (http://prometheus:9090): the charts then show every process's processed, duplicates, conflicts, dead letters, held and stale per scope")
	fl.BoolVar(&cfg.openMetrics, "open-metrics", false, "serve /metrics without the --auth authentication")
	fl.DurationVar(&cfg.store.timeout, "timeout", 30*time.Second, "give up opening the store and the broker after this long")
	cfg.broker.add(c, false)
	c.Flag("broker").Usage = "broker URL (default $IDEM_BROKER): show its dead letters, and replay them with --actions; forms below"
	c.Long = withDSNForms(c.Long)
	return c
}

type consoleConfig struct {
	store       storeFlags
	broker      brokerFlags // optional: the dead letters shown
	addr        string
	actions     bool
	auth        string // none, basic, token
	allowHosts  []string
	openMetrics bool
	prometheus  string
	env         func(string) string // default os.Getenv
}

// sessionCookie holds the session of a browser that opened a login link.
const sessionCookie = "idem_console_session"

// serveConsole serves until ctx ends. ready, when set, receives the
// address listened on.
func serveConsole(ctx context.Context, cfg consoleConfig, stdout, stderr io.Writer, ready func(addr string)) error {
	gate, err := newConsoleGate(cfg)
	if err != nil {
		return err
	}
	timeout := cfg.store.timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := cfg.store.open(octx, true)
	if err != nil {
		return err
	}
	defer h.Close()
	q, err := cfg.broker.open(octx, false)
	if err != nil {
		return err
	}
	cancel()
	var queues []console.DeadLetters
	if q != nil {
		defer q.Close()
		queues = []console.DeadLetters{consoleQueue{q}}
	}
	if _, err := inspector(h, "console"); err != nil {
		return err
	}
	st, ok := h.Store.(console.Store)
	if !ok {
		return fmt.Errorf("the %s store cannot serve the console", h.Scheme)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	opts := console.Options{Logger: log, AllowedHosts: gate.hosts, Authorize: gate.authorize, ReadOnly: !cfg.actions,
		Prometheus: cfg.prometheus, DeadLetters: queues}
	con := console.New(st, opts)
	defer con.Close()
	exp, err := idemprom.New(idemprom.Options{Store: st})
	if err != nil {
		return err
	}
	defer exp.Shutdown(context.Background())
	mux := http.NewServeMux()
	if cfg.openMetrics {
		mux.Handle("/metrics", exp)
	} else {
		mux.Handle("/metrics", gate.authenticate(exp))
	}
	mux.Handle("/login", gate.loginHandler())
	mux.Handle("/", gate.authenticate(con))

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	addr := ln.Addr().String()
	mode := "read-only"
	if cfg.actions {
		mode = "actions allowed from the browser that opens the login link"
		if gate.auth != "none" {
			mode = "actions allowed to authenticated clients"
		}
	}
	fmt.Fprintf(stdout, "idem console: %s (%s) at http://%s/ (%s, --auth %s); metrics at http://%s/metrics\n",
		h.Redacted, h.Where, addr, mode, gate.auth, addr)
	if q != nil {
		fmt.Fprintf(stdout, "Dead letters of %s at http://%s/deadletters\n", q.Name(), addr)
	}
	gate.printSecrets(stdout, addr)
	fmt.Fprintln(stdout, "Stop with Ctrl-C.")
	if ready != nil {
		ready(addr)
	}
	srv := &http.Server{Handler: console.AllowHosts(gate.hosts, mux), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stop serving %s: %w", addr, err)
	}
	<-done
	return nil
}

// consoleGate is the authentication of 'idem console': who may read and
// who may act.
type consoleGate struct {
	auth          string // none, basic, token
	actions       bool
	hosts         []string
	user, secret  string // basic: user and password; token: the bearer token
	printPassword bool   // the secret was generated, so it is printed once
	who           string // the local operator's name, for the logs

	mu       sync.Mutex
	links    map[string]bool   // one-time login nonces not yet used
	sessions map[string]string // session id -> who
	logins   int
}

func newConsoleGate(cfg consoleConfig) (*consoleGate, error) {
	env := cfg.env
	if env == nil {
		env = os.Getenv
	}
	host, _, err := net.SplitHostPort(cfg.addr)
	if err != nil {
		return nil, usagef("--addr %q: %v", cfg.addr, err)
	}
	g := &consoleGate{auth: cfg.auth, actions: cfg.actions, hosts: cfg.allowHosts,
		links: map[string]bool{}, sessions: map[string]string{}, who: "local operator"}
	if u, err := user.Current(); err == nil {
		g.who = u.Username + "@" + hostname()
	}
	if g.auth == "" {
		g.auth = "none"
	}
	remoteHosts := false
	for _, h := range cfg.allowHosts {
		remoteHosts = remoteHosts || !console.LoopbackAddr(net.JoinHostPort(strings.Trim(h, "[]"), "0"))
	}
	switch g.auth {
	case "none":
		if !console.LoopbackAddr(cfg.addr) || remoteHosts {
			return nil, usagef("--addr %s with --allow-host %v serves every record and result to whoever reaches it, read-only too: "+
				"pass --auth basic or --auth token (or listen on a loopback --addr such as 127.0.0.1:8080)", cfg.addr, cfg.allowHosts)
		}
	case "basic":
		g.user, g.secret = env("IDEM_CONSOLE_USER"), env("IDEM_CONSOLE_PASSWORD")
		if g.user == "" {
			g.user = "operator"
		}
	case "token":
		g.secret = env("IDEM_CONSOLE_TOKEN")
	default:
		return nil, usagef("--auth %q: none, basic or token", cfg.auth)
	}
	if g.auth != "none" && g.secret == "" {
		g.secret, g.printPassword = randomToken(), true
	}
	if ip := net.ParseIP(host); !console.LoopbackAddr(cfg.addr) && len(cfg.allowHosts) == 0 {
		if ip == nil || ip.IsUnspecified() {
			return nil, usagef("--addr %s: name the host clients reach the console by with --allow-host NAME "+
				"(requests for other Host names are refused, against DNS rebinding)", cfg.addr)
		}
		g.hosts = []string{host} // the address itself is the name clients use
	}
	return g, nil
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// printSecrets prints what an operator needs to get in: a generated
// password or token, and a one-time login link where browsers use one.
func (g *consoleGate) printSecrets(w io.Writer, addr string) {
	switch {
	case g.auth == "basic" && g.printPassword:
		fmt.Fprintf(w, "Basic authentication: user %s, password %s (set IDEM_CONSOLE_PASSWORD to choose it)\n", g.user, g.secret)
	case g.auth == "basic":
		fmt.Fprintf(w, "Basic authentication: user %s, password from IDEM_CONSOLE_PASSWORD\n", g.user)
	case g.auth == "token" && g.printPassword:
		fmt.Fprintf(w, "Bearer token: %s (set IDEM_CONSOLE_TOKEN to choose it)\n", g.secret)
	}
	if g.auth == "token" || g.auth == "none" && g.actions {
		fmt.Fprintf(w, "Login link (works once, for one browser): %s\n", g.newLink(addr))
	}
}

// newLink mints a one-time login link.
func (g *consoleGate) newLink(addr string) string {
	n := randomToken()
	g.mu.Lock()
	g.links[n] = true
	g.mu.Unlock()
	return "http://" + addr + "/login?" + url.Values{"once": {n}}.Encode()
}

// caller names the authenticated client of r, "" when it is none.
func (g *consoleGate) caller(r *http.Request) string {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		g.mu.Lock()
		who := g.sessions[ck.Value]
		g.mu.Unlock()
		if who != "" {
			return who
		}
	}
	switch g.auth {
	case "basic":
		u, p, ok := r.BasicAuth()
		if ok && subtle.ConstantTimeCompare([]byte(u), []byte(g.user)) == 1 && subtle.ConstantTimeCompare([]byte(p), []byte(g.secret)) == 1 {
			return u
		}
	case "token":
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && subtle.ConstantTimeCompare([]byte(v), []byte(g.secret)) == 1 {
			return "bearer token holder"
		}
	}
	return ""
}

// authenticate lets through only authenticated clients when --auth is set.
func (g *consoleGate) authenticate(next http.Handler) http.Handler {
	if g.auth == "none" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.caller(r) == "" {
			if g.auth == "basic" {
				w.Header().Set("WWW-Authenticate", `Basic realm="idem console", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="idem console"`)
			}
			http.Error(w, "idem console: authentication required (--auth "+g.auth+"; see idem console --help)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorize is the console's Authorize: a page may be read by whoever
// authenticate let through; an action needs --actions and, without --auth,
// the session of the browser that opened the login link.
func (g *consoleGate) authorize(r *http.Request, a console.Action) (string, error) {
	who := g.caller(r)
	if a.Op == console.OpView {
		return who, nil
	}
	if who == "" {
		return "", errors.New("this browser has not opened the login link 'idem console --actions' printed")
	}
	if g.auth == "none" {
		return g.who, nil
	}
	return who, nil
}

// loginHandler spends a one-time login link on the browser that opens it:
// it gets a session cookie, and the link is refused from then on, to it and
// to every other client. With --auth token, a POST with the bearer token
// mints a new link.
func (g *consoleGate) loginHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			if g.auth != "token" || g.caller(r) == "" {
				http.Error(w, "idem console: a new login link needs --auth token and the bearer token", http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, g.newLink(r.Host))
			return
		case http.MethodGet, http.MethodHead:
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		n := r.URL.Query().Get("once")
		g.mu.Lock()
		ok := n != "" && g.links[n]
		var who string
		if ok {
			delete(g.links, n)
			g.logins++
			who = g.who
			if g.auth != "none" {
				who = fmt.Sprintf("login link %d", g.logins)
			}
		}
		g.mu.Unlock()
		if !ok {
			http.Error(w, "idem console: this login link is wrong or was used already (a link works once, for one browser)", http.StatusForbidden)
			return
		}
		sid := randomToken()
		g.mu.Lock()
		g.sessions[sid] = who
		g.mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}
