package cosmostest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxDateSkew is how far x-ms-date may be from the server's time before
// Cosmos DB refuses the signature.
const maxDateSkew = 15 * time.Minute

// authorize checks the master-key signature of r, as Cosmos DB does: an
// HMAC-SHA256, with the account key, of the verb, the resource type, the
// resource link and x-ms-date. It returns 0 when r may proceed, else the
// status (401) and the reason.
func (s *Server) authorize(r *http.Request, rt route) (int, string) {
	raw := r.Header.Get("Authorization")
	if raw == "" {
		return http.StatusUnauthorized, "Required Header authorization is missing. Ensure a valid Authorization token is passed."
	}
	tok, err := url.QueryUnescape(raw)
	if err != nil {
		return http.StatusUnauthorized, "The authorization header is not URL-encoded"
	}
	// The token is type=..&ver=..&sig=.. with the signature's base64 as
	// it is ('+' included), so it is split by hand, not as a query.
	fields := map[string]string{}
	for _, kv := range strings.Split(tok, "&") {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	switch typ := fields["type"]; typ {
	case "master":
	case "aad", "resource":
		return http.StatusUnauthorized, "cosmostest does not model " + typ + " tokens: sign requests with the account key (azcosmos.NewClientWithKey)"
	default:
		return http.StatusUnauthorized, "Invalid authorization token type " + typ
	}
	if v := fields["ver"]; v != "1.0" {
		return http.StatusUnauthorized, "Invalid authorization token version " + v
	}
	date := r.Header.Get("x-ms-date")
	if date == "" {
		return http.StatusUnauthorized, "Required Header x-ms-date is missing"
	}
	at, err := http.ParseTime(date)
	if err != nil {
		return http.StatusUnauthorized, "The x-ms-date header " + date + " is not an HTTP date"
	}
	// The signature's date is checked against the wall clock, not the
	// clock Advance moves: a client signs with its own time.
	if d := time.Since(at); d > maxDateSkew || d < -maxDateSkew {
		return http.StatusUnauthorized, "The authorization token is not valid at the current time: x-ms-date " + date + " is more than 15 minutes from the server's"
	}
	want := s.sign(r.Method, rt.typ, rt.link, date)
	got, err := base64.StdEncoding.DecodeString(fields["sig"])
	if err != nil || !hmac.Equal(got, want) {
		return http.StatusUnauthorized, "The input authorization token can't serve the request. The wrong key is being used or the expected payload is not built as per the protocol. " +
			"Server used the following payload to sign: '" + strings.ReplaceAll(payload(r.Method, rt.typ, rt.link, date), "\n", `\n`) + "'"
	}
	return 0, ""
}

// payload is the text a master-key signature covers.
func payload(method, typ, link, date string) string {
	return strings.ToLower(method) + "\n" + strings.ToLower(typ) + "\n" + link + "\n" + strings.ToLower(date) + "\n\n"
}

func (s *Server) sign(method, typ, link, date string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(payload(method, typ, link, date)))
	return h.Sum(nil)
}
