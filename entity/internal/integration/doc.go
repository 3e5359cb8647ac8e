// Package integration holds entity's tests against real databases: entity
// mode and version guards on SQLite, PostgreSQL and MariaDB through
// database/sql, entitypgx's store on PostgreSQL, the build check that
// idem.New refuses both entity stores, and the benchmark comparing entity
// mode with a raw insert and with store/postgres's inbox. It is a module of
// its own, required by no other, so that the database drivers, store/postgres
// and entitypgx's pgx stay out of the entity module's requirements, and out
// of the module graph of every program that imports package entity (such as
// store/mongo's users).
package integration
