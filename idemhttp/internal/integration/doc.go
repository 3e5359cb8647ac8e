// Package integration runs idemhttp's behaviours under concurrent requests
// and its middleware benchmark (idemhttp/internal/idemhttptest's Run and
// BenchMiddleware) on the embedded SQLite store, as idemhttp's own tests
// run them on store/memory. It is a module of its own, which no library
// module requires, so that store/sqlite and the SQLite driver stay out of
// the module graph of every user of idemhttp.
package integration
