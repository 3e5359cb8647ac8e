// Package integration holds idemprom's ops checks (ops_test.go): the alert
// rules (ops/prometheus) and the dashboard (ops/grafana) read only metrics
// a scrape of the exporter serves, every alert has its section in
// ops/ALERTS.md, and, where promtool is installed, the rules and the
// dashboard's queries parse and the consumers' alerts fire when they
// should. The checks read the rules as YAML (go.yaml.in/yaml/v3); they are
// a module of their own, which no library module requires, so that the
// YAML parser stays out of the module graph of every user of idemprom. The
// exporter's own tests stay in idemprom; the scrape and the traffic both
// use are idemprom/internal/idempromtest's.
package integration
