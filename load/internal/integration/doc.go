// Package integration holds load's tests against real databases: load.Marked
// through the inbox on SQLite and PostgreSQL, loadpgx.Table on PostgreSQL
// through entitypgx's store, the 1M-row benchmark against plain inserts and
// COPY, and the examples that need those stores. It is a module of its own,
// required by no other, so that store/sqlite, store/postgres, entitypgx and
// internal/pgtest stay out of the load module's requirements, and out of the
// module graph of every program that imports load or loadpgx. Load's tests on
// an in-memory table and its CSV tests stay in package load.
package integration
