// Package integration holds idemotel's tests, which read the metrics and
// spans the observer and the consumer hooks record through the
// OpenTelemetry SDK (a manual metric reader, a span recorder). They are a
// module of their own, which no library module requires, so that the SDK
// (go.opentelemetry.io/otel/sdk and sdk/metric) stays out of the module
// graph of every user of idemotel, who brings the SDK of their choice. The
// package's Example, which wires the hooks to a meter provider without the
// SDK, stays in idemotel.
package integration
