package integration_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/store/memory"
)

// getHost fetches u with the Host header set to host, as a DNS-rebinding
// page's request carries its own name.
func getHost(t *testing.T, u, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var quiet = slog.New(slog.DiscardHandler)

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHostAllowList(t *testing.T) {
	st := memory.New()
	seed(t, st, idemNow())
	loop := serve(t, console.New(st, console.Options{Logger: quiet}))
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:8080", http.StatusOK},
		{"localhost", http.StatusOK},
		{"LOCALHOST:9", http.StatusOK},
		{"app.localhost", http.StatusOK},
		{"[::1]:8080", http.StatusOK},
		{"127.1.2.3", http.StatusOK},
		{"rebind.attacker.example", http.StatusMisdirectedRequest},
		{"rebind.attacker.example:8080", http.StatusMisdirectedRequest},
		{"localhost.attacker.example", http.StatusMisdirectedRequest},
		{"10.0.0.1", http.StatusMisdirectedRequest},
	} {
		for _, p := range []string{"/", "/records", "/static/console.css"} {
			code, body := getHost(t, loop+p, tc.host)
			if code != tc.want {
				t.Errorf("Host %q %s: status %d, want %d", tc.host, p, code, tc.want)
			}
			if code != http.StatusOK && strings.Contains(body, "billing") {
				t.Errorf("Host %q %s: a refused request shows records: %.200s", tc.host, p, body)
			}
		}
	}

	// Named hosts are served to others: a page then needs Authorize.
	named := serve(t, console.New(st, console.Options{Logger: quiet, AllowedHosts: []string{"idem.example.com", "*.ops.example"}}))
	for _, h := range []string{"idem.example.com", "idem.example.com:443", "a.ops.example"} {
		if code, body := getHost(t, named+"/", h); code != http.StatusForbidden || !strings.Contains(body, "no authorisation hook") {
			t.Errorf("named Host %q without Authorize: %d %.200s, want 403", h, code, body)
		}
	}
	if code, _ := getHost(t, named+"/", "ops.example"); code != http.StatusMisdirectedRequest {
		t.Errorf("*.ops.example answered ops.example: %d", code)
	}
	if code, _ := getHost(t, named+"/", "other.example.com"); code != http.StatusMisdirectedRequest {
		t.Errorf("an unnamed host: %d", code)
	}

	var views atomic.Int64
	auth := func(r *http.Request, a console.Action) (string, error) {
		if a.Op == console.OpView {
			views.Add(1)
		}
		if r.Header.Get("X-Deny") != "" {
			return "mallory", errors.New("no")
		}
		return "alice", nil
	}
	authd := serve(t, console.New(st, console.Options{Logger: quiet, AllowedHosts: []string{"idem.example.com"}, Authorize: auth}))
	if code, _ := getHost(t, authd+"/records", "idem.example.com"); code != http.StatusOK || views.Load() != 1 {
		t.Errorf("authorised view: %d, views asked %d", code, views.Load())
	}
	req, _ := http.NewRequest(http.MethodGet, authd+"/", nil)
	req.Host, req.Header = "idem.example.com", http.Header{"X-Deny": {"1"}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("refused view: %d, want 403", resp.StatusCode)
	}
	anyHost := serve(t, console.New(st, console.Options{Logger: quiet, AllowedHosts: []string{console.AnyHost}, Authorize: auth}))
	if code, _ := getHost(t, anyHost+"/", "whatever.example"); code != http.StatusOK {
		t.Errorf("AnyHost: %d", code)
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:1": true, "[::1]:80": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "192.168.1.2:80": false, "idem.example.com:80": false, "nonsense": false,
	} {
		if got := console.LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %v", addr, got)
		}
	}
}

// TestCookiesScopedToMountPath: the CSRF cookie is the console's, not the
// application's, whether the console is mounted whole or under
// http.StripPrefix.
func TestCookiesScopedToMountPath(t *testing.T) {
	st := memory.New()
	seed(t, st, idemNow())
	c := console.New(st, console.Options{Logger: quiet, Authorize: operator})
	t.Cleanup(func() { c.Close() })
	mux := http.NewServeMux()
	mux.Handle("/ops/idem/", c)
	mux.Handle("/admin/idem/", http.StripPrefix("/admin/idem", c))
	base := serve(t, mux)
	for _, tc := range []struct{ path, want string }{
		{"/ops/idem/", "/ops/idem/"},
		{"/ops/idem/records?scope=billing", "/ops/idem/"},
		{"/admin/idem/", "/admin/idem/"},
		{"/admin/idem/record?scope=billing&id=x", "/admin/idem/"},
	} {
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var path string
		for _, ck := range resp.Cookies() {
			if ck.Name == "idem_console_csrf" {
				path = ck.Path
			}
		}
		if path != tc.want {
			t.Errorf("GET %s: CSRF cookie Path %q, want %q", tc.path, path, tc.want)
		}
	}
}

// idemNow is the seed's time: whole seconds, as newFixture takes it.
func idemNow() time.Time { return time.Now().UTC().Truncate(time.Second) }

// TestBrowserCookiesStayUnderTheMount: a real browser that opened the
// console sends its CSRF cookie back to the console's pages and to none of
// the application's other paths.
func TestBrowserCookiesStayUnderTheMount(t *testing.T) {
	ctx := browser(t)
	st := memory.New()
	seed(t, st, idemNow())
	c := console.New(st, console.Options{Logger: quiet, Authorize: operator})
	t.Cleanup(func() { c.Close() })
	mux := http.NewServeMux()
	mux.Handle("/ops/idem/", c)
	mux.HandleFunc("/app/cookies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "cookies:"+r.Header.Get("Cookie"))
	})
	base := serve(t, mux)
	do(t, ctx, chromedp.Navigate(base+"/ops/idem/"), chromedp.WaitVisible(chromedp.CSS("form[action=sweep]")))
	do(t, ctx, chromedp.Navigate(base+"/app/cookies"), chromedp.WaitVisible(chromedp.CSS("body")))
	if body := text(t, ctx, "body"); !strings.HasPrefix(body, "cookies:") || strings.Contains(body, "idem_console") {
		t.Errorf("the application's page got the console's cookie: %q", body)
	}
	// The console's own pages get it: its actions pass the CSRF check.
	do(t, ctx, chromedp.Navigate(base+"/ops/idem/"), chromedp.Click(chromedp.CSS("form[action=sweep] button")),
		chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if flash := text(t, ctx, "p.flash"); !strings.Contains(flash, "Swept") {
		t.Errorf("a sweep from the console's page: %q", flash)
	}
}
