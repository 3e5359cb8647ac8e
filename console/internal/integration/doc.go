// Package integration holds the console's tests: the pages, actions,
// dead letters, fleet view, host allow-list and entity inboxes over HTTP on
// the in-memory and SQLite stores, the same over PostgreSQL, MariaDB and
// Redis, the browser tests (headless Chromium through chromedp; the
// keyboard test regenerates docs/operations.md's pictures in console/testdata with
// -update-screenshot) and the PostgreSQL page benchmark. The handler tests
// share their fixture and seeded records with the browser and server-store
// tests, so they moved with them. It is a module of its own, required by no
// other, so that chromedp, the stores and their drivers stay out of the
// console module's requirements, and out of the module graph of every
// program that imports the console (cmd/idem).
package integration
