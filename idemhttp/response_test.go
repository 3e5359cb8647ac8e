package idemhttp

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

func TestResponseEncoding(t *testing.T) {
	for _, r := range []response{
		{status: 201, header: http.Header{"Content-Type": {"application/json"}, "Vary": {"A", "B"}}, body: []byte(`{"id":1}`)},
		{status: 204, header: http.Header{}},
		{status: 200, header: http.Header{"X-Empty": {""}}, bodyDropped: true},
		{status: 500, header: http.Header{}, body: bytes.Repeat([]byte{0, 1, 2, 0xff}, 1000)},
	} {
		got, err := decodeResponse(r.encode())
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.status != r.status || got.bodyDropped != r.bodyDropped || !bytes.Equal(got.body, r.body) ||
			!reflect.DeepEqual(got.header, r.header) {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 200, 1, 0}, {1, 0}, {1, 0, 0xc8, 0x01, 5}, {1, 0, 0xc8, 0x01, 1, 9, 'a'}} {
		if _, err := decodeResponse(bad); err == nil {
			t.Errorf("decodeResponse(%v) accepted corrupt input", bad)
		}
	}
}

// FuzzDecodeResponse checks that a corrupt record never panics the replay.
func FuzzDecodeResponse(f *testing.F) {
	f.Add((&response{status: 201, header: http.Header{"Location": {"/x"}}, body: []byte("hi")}).encode())
	f.Add([]byte{1, 0, 0xc8, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeResponse(b)
		if err == nil && (r.status < 100 || r.status > 999) {
			t.Fatalf("accepted status %d", r.status)
		}
	})
}
