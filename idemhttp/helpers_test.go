package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp/internal/idemhttptest"
	"github.com/idemgo/idem/store/memory"
)

// do sends a request with the given headers (name, value, ...) and returns
// the answer. It must run on the test's goroutine; others use idemhttptest.TryDo.
func do(t testing.TB, client *http.Client, method, url, body string, headers ...string) idemhttptest.Reply {
	t.Helper()
	r, err := idemhttptest.TryDo(client, method, url, body, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func post(t testing.TB, url, body string, headers ...string) idemhttptest.Reply {
	t.Helper()
	return do(t, http.DefaultClient, http.MethodPost, url, body, headers...)
}

func newStore() *memory.Store { return memory.New() }

// downStore fails every claim, like a database that is unreachable.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, errors.New("connection refused")
}
