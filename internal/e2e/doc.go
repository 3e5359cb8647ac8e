// Package e2e measures what idem costs a real consumer end to end, beside
// the same consumer written by hand without it.
package e2e
