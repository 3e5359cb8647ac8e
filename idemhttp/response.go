package idemhttp

import (
	"encoding/binary"
	"errors"
	"net/http"
	"strconv"
)

// A recorded response is stored as the guard's result in a small versioned
// binary encoding (JSON would base64 the body):
//
//	version byte (1)
//	flags   byte (bit 0: the body was too large and is not recorded)
//	status  uvarint
//	headers uvarint count, then per header: name, uvarint count of values, values
//	body    the rest (empty when not recorded)
//
// where every string is a uvarint length followed by its bytes.
const (
	encodingV1      = 1
	flagBodyDropped = 1
)

// headerBudget is room for the recorded headers beyond the body limit in the
// guard's MaxResultSize.
const headerBudget = 64 << 10

// response is a recorded response.
type response struct {
	status      int
	header      http.Header
	body        []byte
	bodyDropped bool
}

var errCorrupt = errors.New("idemhttp: corrupt recorded response")

func (r *response) encode() []byte {
	size := 16 + len(r.body)
	for k, vs := range r.header {
		size += len(k) + 4
		for _, v := range vs {
			size += len(v) + 4
		}
	}
	b := make([]byte, 0, size)
	var flags byte
	if r.bodyDropped {
		flags |= flagBodyDropped
	}
	b = append(b, encodingV1, flags)
	b = binary.AppendUvarint(b, uint64(r.status))
	b = binary.AppendUvarint(b, uint64(len(r.header)))
	for k, vs := range r.header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, r.body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeResponse reverses encode. It never panics on malformed input.
func decodeResponse(b []byte) (*response, error) {
	if len(b) < 2 || b[0] != encodingV1 {
		return nil, errCorrupt
	}
	r := &response{bodyDropped: b[1]&flagBodyDropped != 0}
	d := decoder{b: b[2:]}
	status := d.uvarint()
	if status < 100 || status > 999 {
		return nil, errCorrupt
	}
	r.status = int(status)
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each header takes at least one byte
		return nil, errCorrupt
	}
	r.header = make(http.Header, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.string()
		m := d.uvarint()
		if m > uint64(len(d.b)) {
			return nil, errCorrupt
		}
		vs := make([]string, 0, m)
		for j := uint64(0); j < m && d.err == nil; j++ {
			vs = append(vs, d.string())
		}
		r.header[k] = vs
	}
	if d.err != nil {
		return nil, d.err
	}
	r.body = d.b
	return r, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errCorrupt
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// replay writes a recorded response, with only the headers allowed now (the
// allow-list may have shrunk since the response was recorded).
func replay(w http.ResponseWriter, r *response, allow map[string]bool) {
	h := w.Header()
	for k, vs := range r.header {
		if allow[http.CanonicalHeaderKey(k)] {
			h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	h.Set(HeaderReplayed, "true")
	if bodyAllowed(r.status) {
		h.Set("Content-Length", strconv.Itoa(len(r.body)))
	}
	w.WriteHeader(r.status)
	if bodyAllowed(r.status) {
		_, _ = w.Write(r.body)
	}
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}
