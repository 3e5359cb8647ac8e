// Package integration holds store/mongo's tests against a server: the
// storetest conformance runs, the edge cases, entity mode, injection, the
// two-process race and the benchmarks. They are a module of their own, which
// no library module requires, so that the server they run on — FerretDB,
// embedded in the test process (internal/ferretdbtest), or a MongoDB at
// IDEM_MONGO_URL — and its dependencies stay out of the module graph of
// every user of store/mongo.
package integration
