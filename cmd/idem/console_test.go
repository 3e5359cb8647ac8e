package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/internal/testenv"
)

// startConsole serves the console of store until the test ends, and returns
// its base URL and what it printed.
func startConsole(t *testing.T, store string, actions bool) (base string, stdout, stderr *testenv.SyncBuffer) {
	t.Helper()
	return startConsoleWith(t, consoleConfig{store: storeFlags{dsn: store}, addr: "127.0.0.1:0", actions: actions})
}

// startConsoleWith serves the console configured by cfg until the test ends.
func startConsoleWith(t *testing.T, cfg consoleConfig) (base string, stdout, stderr *testenv.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
	addr := make(chan string, 1)
	done := make(chan error, 1)
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
	return send(t, c, method, u, form, nil)
}

// send sends one request, with the form as its body when given and the
// headers (Host too), and returns the status and body.
func send(t *testing.T, c *http.Client, method, u string, form url.Values, header http.Header) (int, string) {
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
	for k, v := range header {
		if k == "Host" {
			req.Host = v[0]
			continue
		}
		req.Header[k] = v
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
	// Without --broker, the Conflicts page says where conflicts are.
	if code, body := fetch(t, c, http.MethodGet, base+"conflicts", nil); code != http.StatusOK || !strings.Contains(body, "Conflicts are dead-lettered") ||
		!strings.Contains(body, "--broker URL") || strings.Contains(body, "Recorder") {
		t.Errorf("conflicts without --broker: %d\n%s", code, body)
	}
	if code, body := fetch(t, c, http.MethodGet, base+"metrics", nil); code != http.StatusOK || !strings.Contains(body, `idem_records_stale{idem_scope="billing"} 1`) {
		t.Errorf("metrics: %d\n%s", code, body)
	}
}

func TestConsoleActionsNeedTheLoginLink(t *testing.T) {
	store := "memory://console-actions"
	st, k, token := parkedRecord(t, store)
	base, stdout, stderr := startConsole(t, store, true)
	m := loginLinkRE.FindStringSubmatch(stdout.String())
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
	// A browser without the login cookie is shown no action, and says
	// why; its resolve is refused.
	stranger := consoleClient(t)
	for _, p := range []string{base, recordURL} {
		_, page := fetch(t, stranger, http.MethodGet, p, nil)
		if strings.Contains(page, `method="post"`) || strings.Contains(page, `name="csrf"`) || strings.Contains(page, "actions enabled") ||
			!strings.Contains(page, `<span class="mode">read-only</span>`) {
			t.Errorf("%s offers actions to a browser that has not opened the login link:\n%s", p, page)
		}
		if p == recordURL && !strings.Contains(page, "has not opened the login link") {
			t.Errorf("the record page does not say why it offers no action:\n%s", page)
		}
	}
	if code, body := fetch(t, stranger, http.MethodPost, base+"resolve", form("")); code != http.StatusForbidden || !strings.Contains(body, "login link") {
		t.Errorf("resolve without the login: %d\n%s", code, body)
	}
	if code, _ := fetch(t, stranger, http.MethodGet, base+"login?once=guessed", nil); code != http.StatusForbidden {
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
	if _, page := fetch(t, op, http.MethodGet, base, nil); !strings.Contains(page, "actions enabled") || !strings.Contains(page, `action="sweep"`) {
		t.Errorf("the overview offers no action to the browser that opened the login link:\n%s", page)
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

var loginLinkRE = regexp.MustCompile(`Login link \(works once, for one browser\): (\S+)`)

// signIn opens the login link the console printed in a new browser-like
// client, and returns the client and the link.
func signIn(t *testing.T, stdout *testenv.SyncBuffer) (*http.Client, string) {
	t.Helper()
	m := loginLinkRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no login link printed:\n%s", stdout)
	}
	c := consoleClient(t)
	if code, _ := fetch(t, c, http.MethodGet, m[1], nil); code != http.StatusOK {
		t.Fatalf("login link: %d", code)
	}
	return c, m[1]
}

func TestConsoleNonLoopbackNeedsAuth(t *testing.T) {
	for _, cfg := range []consoleConfig{
		{addr: "0.0.0.0:0"},
		{addr: "0.0.0.0:0", actions: true},
		{addr: ":0"},
		{addr: "127.0.0.1:0", allowHosts: []string{"idem.example.com"}}, // behind a proxy: served to others
	} {
		cfg.store = storeFlags{dsn: "memory://"}
		err := serveConsole(context.Background(), cfg, io.Discard, io.Discard, nil)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--auth basic or --auth token") {
			t.Errorf("%s %v without --auth: %v, want a usage error naming --auth", cfg.addr, cfg.allowHosts, err)
		}
	}
	cfg := consoleConfig{store: storeFlags{dsn: "memory://"}, addr: "0.0.0.0:0", auth: "token"}
	if err := serveConsole(context.Background(), cfg, io.Discard, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "--allow-host") {
		t.Errorf("0.0.0.0 without --allow-host: %v, want a usage error naming --allow-host", err)
	}
	cfg.auth = "magic"
	if err := serveConsole(context.Background(), cfg, io.Discard, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "none, basic or token") {
		t.Errorf("--auth magic: %v", err)
	}
}

// request sends one request with the given headers (Host too).
func request(t *testing.T, c *http.Client, method, u string, header http.Header) (int, string) {
	t.Helper()
	return send(t, c, method, u, nil, header)
}

func TestConsoleHostHeader(t *testing.T) {
	base, _, _ := startConsole(t, "memory://console-hosts", false)
	c := consoleClient(t)
	for _, p := range []string{"", "records", "metrics", "login?once=x", "static/console.css"} {
		if code, _ := request(t, c, http.MethodGet, base+p, http.Header{"Host": {"rebind.attacker.example"}}); code != http.StatusMisdirectedRequest {
			t.Errorf("/%s for another Host: %d, want 421", p, code)
		}
		if code, _ := request(t, c, http.MethodGet, base+p, http.Header{"Host": {"localhost"}}); code == http.StatusMisdirectedRequest {
			t.Errorf("/%s for localhost: refused", p)
		}
	}
	named, _, _ := startConsoleWith(t, consoleConfig{store: storeFlags{dsn: "memory://console-hosts"}, addr: "127.0.0.1:0",
		auth: "token", allowHosts: []string{"idem.example.com"}, env: env(map[string]string{"IDEM_CONSOLE_TOKEN": "t0ken-for-the-test"})})
	if code, _ := request(t, c, http.MethodGet, named, http.Header{"Host": {"idem.example.com"}, "Authorization": {"Bearer t0ken-for-the-test"}}); code != http.StatusOK {
		t.Errorf("an allowed Host: %d", code)
	}
	if code, _ := request(t, c, http.MethodGet, named, http.Header{"Host": {"other.example.com"}, "Authorization": {"Bearer t0ken-for-the-test"}}); code != http.StatusMisdirectedRequest {
		t.Errorf("another Host: %d, want 421", code)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConsoleLoginLinkWorksOnce(t *testing.T) {
	store := "memory://console-login-once"
	_, k, token := parkedRecord(t, store)
	base, stdout, _ := startConsole(t, store, true)
	op, link := signIn(t, stdout)
	// Spent: refused to the same browser and to any other, which gets no
	// session and so may not act.
	if code, _ := fetch(t, op, http.MethodGet, link, nil); code != http.StatusForbidden {
		t.Errorf("the link used again by the same browser: %d, want 403", code)
	}
	other := consoleClient(t)
	if code, body := fetch(t, other, http.MethodGet, link, nil); code != http.StatusForbidden || !strings.Contains(body, "used already") {
		t.Errorf("the link used again by another client: %d %s, want 403", code, body)
	}
	if _, page := fetch(t, other, http.MethodGet, base+"record?"+url.Values{"scope": {k.Scope}, "id": {k.ID}}.Encode(), nil); strings.Contains(page, `name="csrf"`) {
		t.Errorf("the record page offers a form to the client that reused the link:\n%s", page)
	}
	form := url.Values{"op": {"release"}, "scope": {k.Scope}, "id": {k.ID}, "token": {strconv.FormatInt(token, 10)}}
	if code, _ := fetch(t, other, http.MethodPost, base+"resolve", form); code != http.StatusForbidden {
		t.Errorf("an action by the client that reused the link: %d, want 403", code)
	}
}

func TestConsoleAuthToken(t *testing.T) {
	const tok = "the-bearer-token-of-this-test"
	cfg := consoleConfig{store: storeFlags{dsn: "memory://console-token"}, addr: "127.0.0.1:0", auth: "token",
		env: env(map[string]string{"IDEM_CONSOLE_TOKEN": tok})}
	base, stdout, _ := startConsoleWith(t, cfg)
	if strings.Contains(stdout.String(), tok) {
		t.Errorf("a token from the environment is printed:\n%s", stdout)
	}
	c := consoleClient(t)
	bearer := http.Header{"Authorization": {"Bearer " + tok}}
	for _, p := range []string{"", "records", "metrics"} {
		if code, body := request(t, c, http.MethodGet, base+p, nil); code != http.StatusUnauthorized || strings.Contains(body, "idem_records") {
			t.Errorf("/%s without the token: %d, want 401", p, code)
		}
		if code, _ := request(t, c, http.MethodGet, base+p, http.Header{"Authorization": {"Bearer wrong"}}); code != http.StatusUnauthorized {
			t.Errorf("/%s with a wrong token: %d, want 401", p, code)
		}
		if code, _ := request(t, c, http.MethodGet, base+p, bearer); code != http.StatusOK {
			t.Errorf("/%s with the token: %d", p, code)
		}
	}
	// The printed link signs one browser in; the token mints more.
	b, _ := signIn(t, stdout)
	if code, _ := fetch(t, b, http.MethodGet, base+"records", nil); code != http.StatusOK {
		t.Errorf("a page in the signed-in browser: %d", code)
	}
	if code, _ := request(t, c, http.MethodPost, base+"login", nil); code != http.StatusUnauthorized {
		t.Errorf("a new link without the token: %d, want 401", code)
	}
	code, link := request(t, c, http.MethodPost, base+"login", bearer)
	if code != http.StatusOK || !strings.Contains(link, "/login?once=") {
		t.Fatalf("a new link with the token: %d %s", code, link)
	}
	b2 := consoleClient(t)
	if code, _ := fetch(t, b2, http.MethodGet, strings.TrimSpace(link), nil); code != http.StatusOK {
		t.Errorf("the minted link: %d", code)
	}

	cfg.openMetrics = true
	open, _, _ := startConsoleWith(t, cfg)
	if code, _ := request(t, c, http.MethodGet, open+"metrics", nil); code != http.StatusOK {
		t.Errorf("--open-metrics: /metrics without the token: %d", code)
	}
	if code, _ := request(t, c, http.MethodGet, open, nil); code != http.StatusUnauthorized {
		t.Errorf("--open-metrics opened the pages: %d", code)
	}
}

func TestConsoleAuthBasic(t *testing.T) {
	store := "memory://console-basic"
	st, k, token := parkedRecord(t, store)
	base, stdout, stderr := startConsoleWith(t, consoleConfig{store: storeFlags{dsn: store}, addr: "127.0.0.1:0", auth: "basic", actions: true,
		env: env(map[string]string{"IDEM_CONSOLE_USER": "alice", "IDEM_CONSOLE_PASSWORD": "s3cret"})})
	if strings.Contains(stdout.String(), "s3cret") || strings.Contains(stdout.String(), "Login link") {
		t.Errorf("basic auth prints a password from the environment or a login link:\n%s", stdout)
	}
	c := consoleClient(t)
	if code, _ := request(t, c, http.MethodGet, base+"metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("/metrics without credentials: %d, want 401", code)
	}
	basic := func(u, p string) http.Header {
		r, _ := http.NewRequest(http.MethodGet, base, nil)
		r.SetBasicAuth(u, p)
		return r.Header
	}
	if code, _ := request(t, c, http.MethodGet, base+"metrics", basic("alice", "wrong")); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong password: %d, want 401", code)
	}
	if code, _ := request(t, c, http.MethodGet, base+"metrics", basic("alice", "s3cret")); code != http.StatusOK {
		t.Errorf("/metrics with the password: %d", code)
	}
	// An action by the authenticated user is logged with the user's name.
	rt := &basicTransport{user: "alice", pass: "s3cret"}
	ac := consoleClient(t)
	ac.Transport = rt
	_, page := fetch(t, ac, http.MethodGet, base+"record?"+url.Values{"scope": {k.Scope}, "id": {k.ID}}.Encode(), nil)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("no form on the record page:\n%s", page)
	}
	form := url.Values{"op": {"release"}, "scope": {k.Scope}, "id": {k.ID}, "token": {strconv.FormatInt(token, 10)}, "csrf": {html.UnescapeString(csrf[1])}}
	if code, body := fetch(t, ac, http.MethodPost, base+"resolve", form); code != http.StatusSeeOther {
		t.Fatalf("resolve with basic auth: %d %s", code, body)
	}
	if r, _ := st.Get(context.Background(), k); r.State != idem.StateReleased {
		t.Fatalf("record not released: %+v", r)
	}
	if !strings.Contains(stderr.String(), "who=alice") {
		t.Errorf("the release is not logged with the user:\n%s", stderr)
	}
}

// basicTransport adds basic credentials to every request, as a browser
// does once the user typed them.
type basicTransport struct{ user, pass string }

func (b *basicTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	return http.DefaultTransport.RoundTrip(r)
}

// TestConsoleFleetConsumerProcess is the consumer process of
// TestConsoleFleetFromOtherProcesses: it runs only as that test's child.
func TestConsoleFleetConsumerProcess(t *testing.T) {
	store := os.Getenv("IDEM_CONSOLE_TEST_CONSUMER")
	if store == "" {
		t.Skip("the consumer process of TestConsoleFleetFromOtherProcesses")
	}
	h, err := dsn.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	g, err := idem.New(h.Store, idem.Options{Scope: os.Getenv("IDEM_CONSOLE_TEST_SCOPE")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		msg := idem.Message{ID: "order-" + strconv.Itoa(i), Payload: []byte("x")}
		for range 2 { // every message delivered twice
			if _, err := g.Do(context.Background(), msg, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestConsoleFleetFromOtherProcesses: consumers in two other processes
// write to a store; a separate idem console shows their work in its
// charts, from the store and from Prometheus.
func TestConsoleFleetFromOtherProcesses(t *testing.T) {
	store := "sqlite://" + filepath.Join(t.TempDir(), "fleet.db")
	h, err := dsn.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := h.Store.(interface{ Migrate(context.Context) error }); ok {
		if err := m.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	for _, scope := range []string{"billing", "mailer"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConsoleFleetConsumerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "IDEM_CONSOLE_TEST_CONSUMER="+store, "IDEM_CONSOLE_TEST_SCOPE="+scope)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("consumer process: %v\n%s", err, out)
		}
	}
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
		w.Header().Set("Content-Type", "application/json")
		v := "0"
		if strings.Contains(r.Form.Get("query"), `idem_outcome="duplicate"`) {
			v = "4" // what the consumers' exporters would have said
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"idem_scope":"billing"},"values":[[%.3f,"%s"]]}]}}`, start, v)
	}))
	t.Cleanup(prom.Close)
	base, _, _ := startConsoleWith(t, consoleConfig{store: storeFlags{dsn: store}, addr: "127.0.0.1:0", prometheus: prom.URL})
	_, body := fetch(t, consoleClient(t), http.MethodGet, base, nil)
	totals := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?s)<section class="scope-charts fleet" data-scope="([^"]*)".*?</section>`).FindAllStringSubmatch(body, -1) {
		for _, td := range regexp.MustCompile(`<td data-total>(\d+)</td>`).FindAllStringSubmatch(m[0], -1) {
			totals[m[1]] = append(totals[m[1]], td[1])
		}
	}
	// billing: the store's completed, claimed, released, retried; then Prometheus's
	// processed, duplicates, conflicts, dead letters, held, superseded, stale.
	want := map[string][]string{
		"billing": {"4", "4", "0", "0", "0", "4", "0", "0", "0", "0", "0"},
		"mailer":  {"4", "4", "0", "0"},
	}
	if fmt.Sprint(totals) != fmt.Sprint(want) {
		t.Errorf("the console's fleet totals %v, want %v", totals, want)
	}
}
