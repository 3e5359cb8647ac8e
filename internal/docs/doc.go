// Package docs holds the tests that keep README.md, CONTRIBUTING.md and
// docs/ true: every Go block in README.md and docs/ is one of the blocks the
// _test.go files here compile; every table row has its table's column count;
// every relative link and #anchor resolves; the README's broker and store
// tables and the package table of docs/architecture.md name the modules of
// go.work, no more and no fewer. It is a test-only module (nothing requires
// it), so it may import every module of the workspace.
package docs
