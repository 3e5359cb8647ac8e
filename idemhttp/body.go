package idemhttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/idemgo/idem"
)

// readBody buffers the request body up to limit bytes and puts a fresh reader
// back on r so the handler reads the same bytes. It answers 413 beyond the
// limit and 400 when the body cannot be read; ok is false then.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, ok bool) {
	tooLarge := func() {
		writeProblem(w, http.StatusRequestEntityTooLarge, ProblemTooLarge,
			fmt.Sprintf("Request bodies sent with an %s are limited to %d bytes.", HeaderKey, limit), 0)
	}
	if r.ContentLength > limit {
		tooLarge()
		return nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	hint := r.ContentLength
	if hint < 0 || hint > limit {
		hint = 512
	}
	body, err := readAll(io.LimitReader(r.Body, limit+1), int(hint)+1)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe) || int64(len(body)) > limit:
		tooLarge()
		return nil, false
	case err != nil:
		writeProblem(w, http.StatusBadRequest, ProblemBadBody, "The request body could not be read.", 0)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, true
}

// fingerprint hashes what makes two requests with one key "the same request":
// the method, the path, the query, the body and the chosen headers.
func fingerprint(r *http.Request, body []byte, headers []string) string {
	parts := make([][]byte, 0, 4+2*len(headers))
	parts = append(parts, []byte(r.Method), []byte(r.URL.EscapedPath()), []byte(r.URL.RawQuery), body)
	for _, h := range headers {
		// Header values cannot contain NUL, so joining on it is unambiguous.
		parts = append(parts, []byte(strings.ToLower(h)), []byte(strings.Join(r.Header.Values(h), "\x00")))
	}
	return idem.Fingerprint(parts...)
}

// readAll is io.ReadAll starting from a buffer of size hint: with the
// Content-Length known, the body is read with one allocation.
func readAll(r io.Reader, hint int) ([]byte, error) {
	b := make([]byte, 0, hint)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
