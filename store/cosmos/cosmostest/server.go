package cosmostest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// EmulatorKey is the account key of Microsoft's Cosmos DB emulator, the
// same on every installation and published in its documentation; a Server
// takes it unless Options.Key says otherwise.
const EmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// Options configure a Server. The zero value serves the emulator's key.
type Options struct {
	// Key is the account key (base64) requests must be signed with;
	// default EmulatorKey.
	Key string
	// Now is the server's clock, which items' _ts and time to live
	// follow; default time.Now. Advance moves it further. (Signatures'
	// x-ms-date is checked against the wall clock.)
	Now func() time.Time
}

// Server is an in-process Azure Cosmos DB for NoSQL account over HTTPS.
// It is safe for concurrent use. See the package doc for what it models.
type Server struct {
	http   *httptest.Server
	key    []byte
	keyB   string
	clock  func() time.Time
	client *http.Client

	mu        sync.Mutex
	dbs       map[string]*database
	offset    time.Duration // Advance's total: the server's time is clock() + offset
	lsn       int64         // the account's log sequence number, one per write
	throttled int           // how many document requests still get 429
	retry     time.Duration // the x-ms-retry-after-ms of a throttled request
	charge    float64       // request units charged so far
	requests  int64         // requests served so far (the account read excluded)
}

// NewServer starts a server on a loopback port. Close it when done.
func NewServer(opts Options) (*Server, error) {
	if opts.Key == "" {
		opts.Key = EmulatorKey
	}
	key, err := base64.StdEncoding.DecodeString(opts.Key)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("cosmostest: Options.Key is not a base64 account key: %v", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{key: key, keyB: opts.Key, clock: opts.Now, dbs: map[string]*database{}}
	s.http = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	// A client that goes away mid-handshake at Close is no news.
	s.http.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.http.StartTLS()
	// The test server's own client keeps two idle connections per host:
	// under a few dozen concurrent requests most would pay a new TLS
	// handshake. Clients of Azure keep a pool; so does this one.
	tr := s.http.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 256
	s.client = &http.Client{Transport: tr}
	return s, nil
}

// Close shuts the server down; its databases are gone with it.
func (s *Server) Close() {
	s.client.CloseIdleConnections()
	s.http.Close()
}

// URL is the account endpoint, "https://127.0.0.1:<port>/".
func (s *Server) URL() string { return s.http.URL + "/" }

// Key is the account key requests must be signed with.
func (s *Server) Key() string { return s.keyB }

// ConnectionString is the account's connection string, for
// azcosmos.NewClientFromConnectionString (with ClientOptions).
func (s *Server) ConnectionString() string {
	return "AccountEndpoint=" + s.URL() + ";AccountKey=" + s.keyB + ";"
}

// CertificatePEM returns the server's certificate, PEM-encoded, for
// clients that cannot take HTTPClient (a command line's ca= file).
func (s *Server) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.http.Certificate().Raw})
}

// HTTPClient returns an HTTP client that trusts the server's certificate
// (made for this server alone). It is what ClientOptions passes as the
// pipeline's transport.
func (s *Server) HTTPClient() *http.Client { return s.client }

// ClientOptions returns azcosmos client options whose transport trusts the
// server's certificate. Set more fields on the result as needed.
func (s *Server) ClientOptions() *azcosmos.ClientOptions {
	return &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: s.HTTPClient()}}
}

// NewClient returns an azcosmos client of the account, signed with its key.
func (s *Server) NewClient() (*azcosmos.Client, error) {
	cred, err := azcosmos.NewKeyCredential(s.keyB)
	if err != nil {
		return nil, err
	}
	return azcosmos.NewClientWithKey(s.URL(), cred, s.ClientOptions())
}

// Advance moves the server's clock forward by d: items whose time to live
// ends within it are gone. Tests use it to see expiry without sleeping.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
}

// Throttle answers the next n requests for items (reads, writes, queries,
// batches) with 429 Too Many Requests and x-ms-retry-after-ms set to
// retryAfter, as an account over its provisioned throughput does. The
// client retries them after that delay (three times, by default).
func (s *Server) Throttle(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttled, s.retry = n, retryAfter
}

// Stats are the totals of what a server has served.
type Stats struct {
	Requests      int64   // requests answered, the account read excluded
	RequestCharge float64 // request units charged (the model of the package doc)
}

// Stats returns the totals so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Requests: s.requests, RequestCharge: s.charge}
}

// now is the server's clock. Callers hold s.mu.
func (s *Server) now() time.Time { return s.clock().Add(s.offset) }

// newRID returns a resource id: random, base64, as Cosmos DB's look.
func newRID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// newActivityID returns a GUID for x-ms-activity-id.
func newActivityID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// route is a request's resource path: its segments, the resource type
// and link the signature covers, and whether it names a feed (a
// collection of resources) rather than one resource.
type route struct {
	segs []string
	typ  string // "", dbs, colls, docs, ...
	link string // dbs/x/colls/y/docs/z, or the feed's owner
	feed bool
}

// parseRoute splits the request path into unescaped segments.
func parseRoute(r *http.Request) (route, error) {
	p := strings.Trim(r.URL.EscapedPath(), "/")
	var rt route
	if p == "" {
		return rt, nil
	}
	for _, raw := range strings.Split(p, "/") {
		seg, err := unescape(raw)
		if err != nil || seg == "" {
			return rt, fmt.Errorf("malformed path segment %q", raw)
		}
		rt.segs = append(rt.segs, seg)
	}
	n := len(rt.segs)
	if n%2 == 1 {
		rt.feed = true
		rt.typ = rt.segs[n-1]
		rt.link = strings.Join(rt.segs[:n-1], "/")
	} else {
		rt.typ = rt.segs[n-2]
		rt.link = strings.Join(rt.segs, "/")
	}
	return rt, nil
}

// serve is the account's HTTP handler: authorization, then the resource.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rt, err := parseRoute(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if status, msg := s.authorize(r, rt); status != 0 {
		writeError(w, status, msg)
		return
	}
	if status, msg := checkConsistency(r); status != 0 {
		writeError(w, status, msg)
		return
	}
	if len(rt.segs) == 0 {
		s.serveAccount(w, r)
		return
	}
	resp := s.handle(r, rt)
	resp.write(w)
}

// handle serves a request for a database, container or item under the
// server's lock.
func (s *Server) handle(r *http.Request, rt route) response {
	body, err := readBody(r)
	if err != nil {
		return errorResponse(http.StatusRequestEntityTooLarge, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if rt.typ == "docs" && s.throttled > 0 {
		s.throttled--
		resp := errorResponse(http.StatusTooManyRequests, "Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later.")
		resp.header.Set("x-ms-retry-after-ms", fmt.Sprint(s.retry.Milliseconds()))
		resp.header.Set("x-ms-substatus", "3200")
		return resp
	}
	resp := s.dispatch(r, rt, body)
	s.charge += resp.charge
	resp.header.Set("x-ms-request-charge", fmt.Sprintf("%.2f", resp.charge))
	resp.header.Set("x-ms-session-token", fmt.Sprintf("0:-1#%d", s.lsn))
	return resp
}

// dispatch picks the operation for the route and method. Callers hold s.mu.
func (s *Server) dispatch(r *http.Request, rt route, body []byte) response {
	segs := rt.segs
	if segs[0] != "dbs" {
		return notModelled("the resource %q (only dbs, colls and docs are served)", segs[0])
	}
	switch len(segs) {
	case 1:
		if r.Method == http.MethodPost && !isQuery(r) {
			return s.createDatabase(body)
		}
		return notModelled("%s on the database feed (listing or querying databases)", methodName(r))
	case 2:
		return s.database(r, segs[1])
	}
	db, ok := s.dbs[segs[1]]
	if !ok {
		return errorResponse(http.StatusNotFound, fmt.Sprintf("Resource Not Found: database %s does not exist", segs[1]))
	}
	if segs[2] != "colls" {
		return notModelled("the resource %q of a database (users, permissions, ...)", segs[2])
	}
	switch len(segs) {
	case 3:
		if r.Method == http.MethodPost && !isQuery(r) {
			return s.createContainer(db, body)
		}
		return notModelled("%s on the container feed (listing or querying containers)", methodName(r))
	case 4:
		return s.container(r, db, segs[3], body)
	}
	c, ok := db.colls[segs[3]]
	if !ok {
		return errorResponse(http.StatusNotFound, fmt.Sprintf("Resource Not Found: container %s does not exist in database %s", segs[3], db.id))
	}
	if segs[4] != "docs" {
		return notModelled("the resource %q of a container (stored procedures, triggers, partition key ranges, conflicts, ...)", segs[4])
	}
	switch len(segs) {
	case 5:
		return s.docsFeed(r, c, body)
	case 6:
		return s.item(r, c, segs[5], body)
	}
	return notModelled("the resource %q of an item (attachments)", segs[6])
}

func methodName(r *http.Request) string {
	if isQuery(r) {
		return "a query"
	}
	return r.Method
}
