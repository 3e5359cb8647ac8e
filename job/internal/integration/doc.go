// Package integration holds package job's tests: the runs, crashes,
// retakes, heartbeats, steps and retention, each on the in-memory store and
// PostgreSQL (and the retention ones on SQLite too), with the test clock
// and the crashable store they share. It is a module of its own, required
// by no other, so that store/postgres, store/sqlite, internal/pgtest and
// their drivers stay out of the job module's requirements, and out of the
// module graph of every program that imports job. The window tests and the
// examples, on the standard library and store/memory, stay in package job.
package integration
