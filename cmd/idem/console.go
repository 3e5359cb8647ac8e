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
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/idemprom"
)

func newConsoleCmd() *cobra.Command {
	var cfg consoleConfig
	c := &cobra.Command{
		Use:   "console",
		Short: "Serve the operator console in the browser: counts, stale and parked records, resolve, sweep",
		Long: `console serves idem's operator console for one store at --addr: the scopes
with their records counted by state, the records of a scope page by page, the
in-progress records with the stale ones marked, one record with its result,
and a Prometheus endpoint of the record gauges at /metrics.

It is read-only unless --actions is given. With --actions it prints a
one-time login link; only a browser that opened it may complete or release
records and sweep, and every action is logged on stderr with the operator's
name. --actions needs a loopback --addr: to offer the console to others,
mount console.New in your own server, behind your own authentication.

Applications mount the same console in their own server, with charts from
their guards' observer: see the console package.`,
		Example: `  idem console --store sqlite://idem.db
  idem console --store postgres://localhost/app --addr 127.0.0.1:9090
  IDEM_STORE=redis://localhost:6379 idem console --actions`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return serveConsole(c.Context(), cfg, c.OutOrStdout(), c.ErrOrStderr(), nil)
		},
	}
	fl := c.Flags()
	fl.StringVar(&cfg.store.dsn, "store", "", "store DSN (default $IDEM_STORE): "+dsnHelp+"; every form is listed above")
	fl.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fl.BoolVar(&cfg.actions, "actions", false, "allow resolving and sweeping from the browser that opens the printed login link")
	fl.DurationVar(&cfg.store.timeout, "timeout", 30*time.Second, "give up opening the store after this long")
	c.Long = withDSNForms(c.Long)
	return c
}

type consoleConfig struct {
	store   storeFlags
	addr    string
	actions bool
}

// loginCookie holds the login token of a browser allowed to act.
const loginCookie = "idem_console_login"

// serveConsole serves until ctx ends. ready, when set, receives the
// address listened on.
func serveConsole(ctx context.Context, cfg consoleConfig, stdout, stderr io.Writer, ready func(addr string)) error {
	host, _, err := net.SplitHostPort(cfg.addr)
	if err != nil {
		return usagef("--addr %q: %v", cfg.addr, err)
	}
	if ip := net.ParseIP(host); cfg.actions && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usagef("--actions serves a login link over plain HTTP, so it needs a loopback --addr (127.0.0.1:PORT); " +
			"to offer actions to others, mount console.New in your own server behind its authentication")
	}
	timeout := cfg.store.timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	octx, cancel := context.WithTimeout(ctx, timeout)
	h, err := cfg.store.open(octx, true)
	cancel()
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := inspector(h, "console"); err != nil {
		return err
	}
	st, ok := h.Store.(console.Store)
	if !ok {
		return fmt.Errorf("the %s store cannot serve the console", h.Scheme)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	opts := console.Options{Logger: log}
	var token string
	if cfg.actions {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		token = base64.RawURLEncoding.EncodeToString(b)
		who := "local operator"
		if u, err := user.Current(); err == nil {
			who = u.Username + "@" + hostname()
		}
		opts.Authorize = func(r *http.Request, a console.Action) (string, error) {
			ck, err := r.Cookie(loginCookie)
			if err != nil || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(token)) != 1 {
				return "", errors.New("this browser has not opened the login link 'idem console --actions' printed")
			}
			return who, nil
		}
	}
	con := console.New(st, opts)
	defer con.Close()
	exp, err := idemprom.New(idemprom.Options{Store: st})
	if err != nil {
		return err
	}
	defer exp.Shutdown(context.Background())
	mux := http.NewServeMux()
	mux.Handle("/metrics", exp)
	mux.Handle("/", loginHandler(token, con))

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	addr := ln.Addr().String()
	mode := "read-only"
	if cfg.actions {
		mode = "actions allowed from the browser that opens the login link"
	}
	fmt.Fprintf(stdout, "idem console: %s (%s) at http://%s/ (%s); metrics at http://%s/metrics\n", h.Redacted, h.Where, addr, mode, addr)
	if cfg.actions {
		fmt.Fprintf(stdout, "Login link (once per browser): http://%s/?login=%s\n", addr, token)
	}
	fmt.Fprintln(stdout, "Stop with Ctrl-C.")
	if ready != nil {
		ready(addr)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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

// loginHandler turns a visit of the login link into a cookie, then sends
// the browser to the same page without the token in its address.
func loginHandler(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if got := q.Get("login"); got != "" && r.Method == http.MethodGet {
			if token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				http.Error(w, "wrong or unused login link: this console was started without --actions, or by another run", http.StatusForbidden)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q.Del("login")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}
