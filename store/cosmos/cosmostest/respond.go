package cosmostest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxItemSize is Cosmos DB's limit on an item's JSON, and on a request
// body.
const maxItemSize = 2 << 20

// response is an answer built under the server's lock and written after.
type response struct {
	status int
	header http.Header
	body   []byte
	charge float64 // request units (charge.go)
	// unmodelled marks a refusal of what the server does not model, which
	// a batch passes on as it is rather than as one operation's failure.
	unmodelled bool
}

func newResponse(status int, body []byte) response {
	h := http.Header{}
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	return response{status: status, header: h, body: body}
}

// jsonResponse answers v as JSON.
func jsonResponse(status int, v any) response {
	b, err := json.Marshal(v)
	if err != nil {
		return errorResponse(http.StatusInternalServerError, "cosmostest: encoding the response: "+err.Error())
	}
	return newResponse(status, b)
}

// errorResponse answers an error the way Cosmos DB does: a JSON body with
// a code and a message.
func errorResponse(status int, msg string) response {
	b, _ := json.Marshal(map[string]string{"code": codeOf(status), "message": msg})
	r := newResponse(status, b)
	r.charge = 1
	return r
}

// notModelled refuses at once what the server does not model, naming it.
func notModelled(format string, args ...any) response {
	r := errorResponse(http.StatusBadRequest, "cosmostest does not model "+fmt.Sprintf(format, args...))
	r.unmodelled = true
	return r
}

func (r response) write(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.Header().Set("x-ms-activity-id", newActivityID())
	w.Header().Set("x-ms-gatewayversion", "cosmostest")
	w.WriteHeader(r.status)
	if r.body != nil {
		_, _ = w.Write(r.body)
	}
}

// writeError writes an error outside the server's lock (authorization,
// routing).
func writeError(w http.ResponseWriter, status int, msg string) {
	r := errorResponse(status, msg)
	r.write(w)
}

// codeOf is the "code" Cosmos DB puts in an error body for status.
func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusConflict:
		return "Conflict"
	case http.StatusPreconditionFailed:
		return "PreconditionFailed"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	}
	return http.StatusText(status)
}

// readBody reads a request body of at most maxItemSize bytes.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxItemSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxItemSize {
		return nil, fmt.Errorf("Request size is too large: the body is over %d bytes", maxItemSize)
	}
	return b, nil
}

func unescape(s string) (string, error) { return url.PathUnescape(s) }

// isQuery reports whether r is a query (POST with the query header).
func isQuery(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("x-ms-documentdb-query"), "true") ||
		strings.EqualFold(r.Header.Get("x-ms-documentdb-isquery"), "true")
}

// consistency levels in order of strength, strongest first.
var consistencies = []string{"Strong", "BoundedStaleness", "Session", "ConsistentPrefix", "Eventual"}

// accountConsistency is the account's default consistency level; a
// request may ask for a weaker one, never a stronger one.
const accountConsistency = "Session"

// checkConsistency accepts x-ms-consistency-level at the account's level
// or weaker, as Cosmos DB does, and refuses a stronger or unknown one.
func checkConsistency(r *http.Request) (int, string) {
	v := r.Header.Get("x-ms-consistency-level")
	if v == "" {
		return 0, ""
	}
	for i, c := range consistencies {
		if strings.EqualFold(c, v) {
			for j, a := range consistencies {
				if a == accountConsistency && i < j {
					return http.StatusBadRequest, fmt.Sprintf("The consistency level %s requested is stronger than the account's default, %s", c, accountConsistency)
				}
			}
			return 0, ""
		}
	}
	return http.StatusBadRequest, fmt.Sprintf("Invalid value %q for the header x-ms-consistency-level", v)
}
