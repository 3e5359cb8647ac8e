package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
)

// csrfCookie holds a random value per browser; forms carry the HMAC of it
// under the console's secret. A page on another origin can neither read the
// cookie nor compute the HMAC, and a cookie planted by a sibling host
// (cookie tossing) is useless without the secret. http.CrossOriginProtection
// refuses cross-origin POSTs before this check runs.
const (
	csrfCookie = "idem_console_csrf"
	csrfField  = "csrf"
)

type csrf struct{ key []byte }

func newCSRF(secret []byte) csrf {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	return csrf{key: secret}
}

// token returns the form token for the request's browser, setting its
// cookie first when it has none.
func (c csrf) token(w http.ResponseWriter, r *http.Request) string {
	v := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		v = ck.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		v = base64.RawURLEncoding.EncodeToString(b)
		// Scoped to the console's own path: the application's other
		// pages never receive it.
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: mountPath(r), HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	return c.sign(v)
}

func (c csrf) sign(v string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("idem console csrf\x00" + v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// valid reports whether the posted form carries the token of the request's
// cookie.
func (c csrf) valid(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) < 32 {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.sign(ck.Value))) == 1
}
