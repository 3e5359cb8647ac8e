package main

import (
	"bytes"
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startConsole serves the console of store until the test ends, and returns
// its base URL and what it printed.
func startConsole(t *testing.T, store string, actions bool) (base string, stdout, stderr *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	addr := make(chan string, 1)
	done := make(chan error, 1)
	cfg := consoleConfig{store: storeFlags{dsn: store}, addr: "127.0.0.1:0", actions: actions}
	go func() { done <- serveConsole(ctx, cfg, stdout, stderr, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		base = "http://" + a + "/"
	case err := <-done:
		cancel()
		t.Fatalf("console did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	return base, stdout, stderr
}

// parkedRecord puts a stale in-progress record in the named memory store.
func parkedRecord(t *testing.T, store string) (idem.Store, idem.Key, int64) {
	t.Helper()
	h, err := dsn.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := idem.Key{Scope: "billing", ID: "order-7"}
	c, err := h.Store.Claim(context.Background(), idem.ClaimRequest{Key: k, Now: now.Add(-time.Hour), LeaseUntil: now.Add(-59 * time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return h.Store, k, c.Record.Token
}

func consoleClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if via[0].Method == http.MethodPost || len(via) > 3 {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

func fetch(t *testing.T, c *http.Client, method, u string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestConsoleReadOnly(t *testing.T) {
	store := "memory://console-read-only"
	st, k, token := parkedRecord(t, store)
	base, stdout, _ := startConsole(t, store, false)
	if !strings.Contains(stdout.String(), "read-only") {
		t.Errorf("the console does not say it is read-only:\n%s", stdout)
	}
	c := consoleClient(t)
	code, body := fetch(t, c, http.MethodGet, base, nil)
	if code != http.StatusOK || !strings.Contains(body, `data-count="stale">`) {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	code, _ = fetch(t, c, http.MethodPost, base+"resolve", url.Values{"op": {"release"}, "scope": {k.Scope}, "id": {k.ID}, "token": {strconv.FormatInt(token, 10)}})
	if code != http.StatusForbidden {
		t.Errorf("resolve on a read-only console: %d, want 403", code)
	}
	if r, _ := st.Get(context.Background(), k); r.State != idem.StateInProgress {
		t.Fatalf("record changed: %+v", r)
	}
	if code, body := fetch(t, c, http.MethodGet, base+"metrics", nil); code != http.StatusOK || !strings.Contains(body, `idem_records_stale{idem_scope="billing"} 1`) {
		t.Errorf("metrics: %d\n%s", code, body)
	}
}

func TestConsoleActionsNeedTheLoginLink(t *testing.T) {
	store := "memory://console-actions"
	st, k, token := parkedRecord(t, store)
	base, stdout, stderr := startConsole(t, store, true)
	m := regexp.MustCompile(`Login link \(once per browser\): (\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no login link printed:\n%s", stdout)
	}
	recordURL := base + "record?" + url.Values{"scope": {k.Scope}, "id": {k.ID}}.Encode()
	csrf := func(c *http.Client) string {
		_, page := fetch(t, c, http.MethodGet, recordURL, nil)
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no form on the record page:\n%s", page)
		}
		return html.UnescapeString(m[1])
	}
	form := func(csrf string) url.Values {
		return url.Values{"op": {"release"}, "scope": {k.Scope}, "id": {k.ID}, "token": {strconv.FormatInt(token, 10)}, "csrf": {csrf}}
	}
	// A browser without the login cookie is refused, CSRF token or not.
	stranger := consoleClient(t)
	if code, body := fetch(t, stranger, http.MethodPost, base+"resolve", form(csrf(stranger))); code != http.StatusForbidden || !strings.Contains(body, "login link") {
		t.Errorf("resolve without the login: %d\n%s", code, body)
	}
	if code, _ := fetch(t, stranger, http.MethodGet, base+"?login=guessed", nil); code != http.StatusForbidden {
		t.Errorf("a wrong login link: %d, want 403", code)
	}
	if r, _ := st.Get(context.Background(), k); r.State != idem.StateInProgress {
		t.Fatalf("record changed: %+v", r)
	}
	// The operator opens the link, then releases the record.
	op := consoleClient(t)
	if code, _ := fetch(t, op, http.MethodGet, m[1], nil); code != http.StatusOK {
		t.Fatalf("login link: %d", code)
	}
	if code, body := fetch(t, op, http.MethodPost, base+"resolve", form(csrf(op))); code != http.StatusSeeOther {
		t.Fatalf("resolve after the login: %d\n%s", code, body)
	}
	if r, _ := st.Get(context.Background(), k); r.State != idem.StateReleased {
		t.Fatalf("record not released: %+v", r)
	}
	if logs := stderr.String(); !strings.Contains(logs, "record released") || !strings.Contains(logs, "who=") {
		t.Errorf("the release is not logged with who did it:\n%s", logs)
	}
}

func TestConsoleActionsOnlyOnLoopback(t *testing.T) {
	err := serveConsole(context.Background(), consoleConfig{store: storeFlags{dsn: "memory://"}, addr: "0.0.0.0:0", actions: true}, io.Discard, io.Discard, nil)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("--actions on 0.0.0.0: %v, want a usage error about loopback", err)
	}
}
