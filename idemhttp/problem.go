package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem detail, the body of every error response the
// middleware writes itself (Content-Type application/problem+json).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Problem types. Each is a stable URI clients can compare; it points at the
// package's README, which explains it.
const (
	// ProblemKeyMissing (400): the route requires an Idempotency-Key and the
	// request has none.
	ProblemKeyMissing = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#key-missing"
	// ProblemKeyInvalid (400): the Idempotency-Key is malformed, too long, or
	// sent more than once.
	ProblemKeyInvalid = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#key-invalid"
	// ProblemUnauthenticated (401): the Principal function found no caller
	// identity, which keyed requests need.
	ProblemUnauthenticated = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#unauthenticated"
	// ProblemInProgress (409): a request with this key is being processed;
	// retry later (see Retry-After) with the same key.
	ProblemInProgress = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#in-progress"
	// ProblemKeyReused (422): the key was used before for a different
	// request (method, path, query, body or fingerprinted headers differ).
	ProblemKeyReused = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#key-reused"
	// ProblemTooLarge (413): the request body exceeds the limit the
	// middleware buffers to fingerprint it.
	ProblemTooLarge = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#body-too-large"
	// ProblemBadBody (400): the request body could not be read.
	ProblemBadBody = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#body-unreadable"
	// ProblemNotReplayable (410): the request was processed, but its response
	// was too large to record, so it cannot be replayed. Do not retry with a
	// new key: the effect has happened.
	ProblemNotReplayable = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#response-not-replayable"
	// ProblemStale (409): a previous attempt with this key stopped without
	// finishing and the guard's stale policy parked it for an operator.
	ProblemStale = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#stale"
	// ProblemUnavailable (503): the idempotency store could not be reached;
	// retry later with the same key.
	ProblemUnavailable = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#store-unavailable"
	// ProblemWebhookUnverified (401): a webhook's Verify function rejected
	// the delivery.
	ProblemWebhookUnverified = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#webhook-unverified"
	// ProblemWebhookNoID (400): a webhook delivery has no delivery id.
	ProblemWebhookNoID = "https://github.com/idemgo/idem/blob/main/idemhttp/README.md#webhook-no-id"
)

var problemTitles = map[string]string{
	ProblemKeyMissing:        "Idempotency-Key required",
	ProblemKeyInvalid:        "Invalid Idempotency-Key",
	ProblemUnauthenticated:   "Caller identity required",
	ProblemInProgress:        "Request in progress",
	ProblemKeyReused:         "Idempotency-Key reused",
	ProblemTooLarge:          "Request body too large",
	ProblemBadBody:           "Request body unreadable",
	ProblemNotReplayable:     "Response not replayable",
	ProblemStale:             "Request stalled",
	ProblemUnavailable:       "Idempotency store unavailable",
	ProblemWebhookUnverified: "Webhook delivery not verified",
	ProblemWebhookNoID:       "Webhook delivery id missing",
}

// writeProblem writes an RFC 9457 body. retryAfter > 0 adds Retry-After in
// whole seconds (at least 1).
func writeProblem(w http.ResponseWriter, status int, typ, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Language", "en")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if retryAfter > 0 {
		secs := int64((retryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	body, _ := json.Marshal(Problem{Type: typ, Title: problemTitles[typ], Status: status, Detail: detail})
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
