package idem

import (
	"context"
	"strings"
)

// CorrelationFunc returns a message's correlation id: the identifier that
// ties it to the request or business flow it belongs to (not its dedup key).
// Logs, metrics exemplars and spans carry it beside the key.
type CorrelationFunc func(Message) string

// DefaultCorrelation is the correlation id of m: m.CorrelationID (the
// broker's own correlation id, filled by the integrations), else the trace
// id of the W3C trace context the producer propagated in the traceparent
// header, else "".
func DefaultCorrelation(m Message) string {
	if m.CorrelationID != "" {
		return m.CorrelationID
	}
	return TraceID(m.Header("traceparent"))
}

// HeaderCorrelation reads the correlation id from the named header (for
// example x-request-id), falling back to DefaultCorrelation.
func HeaderCorrelation(name string) CorrelationFunc {
	return func(m Message) string {
		if v := m.Header(name); v != "" {
			return v
		}
		return DefaultCorrelation(m)
	}
}

// TraceID returns the trace id of a W3C traceparent value
// ("00-<32 hex trace id>-<16 hex parent id>-<flags>"), or "" when tp is not
// one.
//
// It allocates nothing: the guard calls it for every message.
func TraceID(tp string) string {
	if tp == "" {
		return "" // most messages: no traceparent header
	}
	version, rest, _ := strings.Cut(strings.TrimSpace(tp), "-")
	id, rest, _ := strings.Cut(rest, "-")
	if len(version) != 2 || len(id) != 32 || !strings.Contains(rest, "-") || strings.Trim(id, "0") == "" {
		return ""
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return id
}

type correlationCtx struct{}

// ContextWithCorrelation returns a context carrying a correlation id. Do and
// DoTx put the message's there (Options.Correlation); callers of DoKey (HTTP
// middleware, job runners) may put their own.
func ContextWithCorrelation(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, correlationCtx{}, id)
}

// CorrelationFromContext returns the correlation id in ctx, or "".
func CorrelationFromContext(ctx context.Context) string {
	id, _ := ctx.Value(correlationCtx{}).(string)
	return id
}
