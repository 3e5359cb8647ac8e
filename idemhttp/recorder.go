package idemhttp

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
)

// recorder passes the handler's response through to the client as it is
// written (the first client is not delayed) and records the status, the
// allowed headers and up to limit bytes of the body for replay.
type recorder struct {
	w      http.ResponseWriter
	allow  map[string]bool
	limit  int
	status int
	header http.Header
	body   bytes.Buffer
	size   int64 // bytes the handler wrote, recorded or not

	hijacked bool
}

func newRecorder(w http.ResponseWriter, allow map[string]bool, limit int) *recorder {
	return &recorder{w: w, allow: allow, limit: limit}
}

// Header returns the client's header map: the handler sets headers on the
// real response.
func (r *recorder) Header() http.Header { return r.w.Header() }

// WriteHeader records the status and snapshots the allowed headers. 1xx
// informational responses (103 Early Hints) go to the client unrecorded.
func (r *recorder) WriteHeader(code int) {
	if r.status != 0 {
		r.w.WriteHeader(code) // superfluous: let net/http log it
		return
	}
	if code >= 100 && code < 200 {
		r.w.WriteHeader(code)
		return
	}
	r.status = code
	r.snapshot()
	r.w.WriteHeader(code)
}

func (r *recorder) snapshot() {
	r.header = make(http.Header)
	for k, vs := range r.w.Header() {
		if r.allow[http.CanonicalHeaderKey(k)] {
			r.header[k] = append([]string(nil), vs...)
		}
	}
}

// Write records p (up to the limit) before sending it, so the record holds
// what the handler produced even if the client has gone away.
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.size += int64(len(p))
	if r.size <= int64(r.limit) {
		r.body.Write(p)
	}
	return r.w.Write(p)
}

// Flush sends buffered data to the client (streaming handlers).
func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(r.w).Flush()
}

// Unwrap lets http.ResponseController reach the client's writer (deadlines,
// full duplex).
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// Hijack hands the connection to the handler. A hijacked response cannot be
// recorded, so the key is released afterwards.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(r.w).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return c, rw, err
}

var errHijacked = errors.New("idemhttp: the handler hijacked the connection; the response cannot be recorded")

// releaseError makes the guard release the key after a response that must
// not be recorded (a 5xx by default, a non-2xx webhook answer).
type releaseError struct{ status int }

func (e releaseError) Error() string {
	return "idemhttp: status " + http.StatusText(e.status) + " released the key for a retry"
}

// finish returns the recorded response for the guard to store, or an error
// that makes the guard release the key. keep says which statuses are
// recorded.
func (r *recorder) finish(keep func(status int) bool) ([]byte, error) {
	if r.hijacked {
		return nil, errHijacked
	}
	if r.status == 0 {
		// The handler wrote nothing: net/http sends 200 with no body.
		r.status = http.StatusOK
		r.snapshot()
	}
	if !keep(r.status) {
		return nil, releaseError{r.status}
	}
	resp := response{status: r.status, header: r.header}
	if r.size > int64(r.limit) {
		resp.bodyDropped = true
	} else {
		resp.body = r.body.Bytes()
	}
	return resp.encode(), nil
}
