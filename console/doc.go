// Package console is idem's operator console: an http.Handler, rendered on
// the server with html/template and a small vendored script (htmx) from an
// embedded file system, that mounts in the application's own server.
//
//	rec := console.NewRecorder(console.RecorderOptions{})       // charts; optional
//	g, err := idem.New(store, idem.Options{Scope: "billing", Observer: rec})
//	mux.Handle("/idem/", console.New(store, console.Options{
//		Recorder: rec,
//		// Without Authorize the console is read-only.
//		Authorize: func(r *http.Request, a console.Action) (string, error) {
//			u := auth.User(r) // the server's own authentication
//			if !u.IsOperator() {
//				return u.Name, errors.New("operators only")
//			}
//			return u.Name, nil
//		},
//	}))
//
// `idem console --store DSN` serves it alone.
//
// Pages: the scopes with their records counted by state; the records of a
// scope, paged by cursor; the in-progress records with how long each has been
// held, the stale ones (lease ended) marked; the stale and parked records
// waiting for an operator; the conflicts (the dead letters of reason
// conflict in Options.DeadLetters, each with both fingerprints, the stored
// state its headers carry and its key's record now; and the recent
// conflicts, parked keys and dead letters a Recorder saw; without either,
// the page says where conflicts wait and how to read them); one record
// with everything it holds and a
// preview of its result; with Options.Outbox, the outbox's pending and
// parked messages, its lag and the relay's lease; the fleet's charts per
// scope over the last hour, from what every process shares: the store's
// records counted over time (idem.ActivityCounter: claimed, completed,
// released, retried) and, with Options.Prometheus, the guards' idemprom
// counts through Prometheus's query API (processed, duplicates, conflicts,
// dead letters, held, superseded, stale), so a console run apart from the
// consumers (idem console) sees their work; and, with a Recorder (an
// in-process ring of the last hour), this process's own charts of
// outcomes and of claim and handler latency percentiles.
//
// With Options.DeadLetters (one console.DeadLetters per broker queue: a
// NATS dead-letter stream, a RabbitMQ dead-letter queue, a Kafka
// dead-letter topic, a Service Bus $DeadLetterQueue), a Dead letters page
// lists each queue's dead letters with their reason and age, filtered by
// reason; one dead letter's page puts idem's headers (Idem-Fingerprint,
// Idem-Stored-*) beside the stored record of its key, read from the store,
// and says which content holds the key and so what a replay does (a
// duplicate, a conflict again, processed). The console imports no broker:
// the application adapts its brokers' dead letters to the interface, and
// `idem console --broker URL` gives it the queues `idem dlq` reads.
//
//	console.New(store, console.Options{
//		Authorize:   authorize,
//		DeadLetters: []console.DeadLetters{ordersDLQ}, // Name, List, Replay
//	})
//
// With Options.Entities, an Entities page shows entity-mode inboxes
// (package entity: the key in the business row): the recent keys with
// their row's id and version (EntitySQL reads them from the table), and
// the scope's conflicts and stale versions from the Recorder and
// Prometheus.
//
// Actions: complete or release an in-progress record (the answer to a
// parked or stale one, with the fencing token the operator saw, so a record
// taken over meanwhile is never overwritten), sweep expired records, retry
// parked outbox messages, and replay dead letters through their queue's
// Replay: one, a ticked selection, or every one of a reason, each in two
// POSTs, the first showing exactly what will be replayed and the second,
// confirmed, replaying those ids and no other (a dead letter of the reason
// written meanwhile waits for the next replay).
// There are none unless the embedding server supplies Options.Authorize,
// and a viewer it refuses is shown none (pages ask it, Action.Offer set,
// before drawing a form); every action is a POST from a form carrying a
// CSRF token bound to the browser, cross-origin requests are refused
// (http.CrossOriginProtection), and every action taken or refused is
// logged through slog with who asked.
//
// The console answers only requests whose Host header is a loopback name
// or one of Options.AllowedHosts (421 otherwise: a DNS-rebinding page
// carries its own name); a console served to other hosts asks Authorize
// for every page too (OpView), and refuses every page without it. Its
// CSRF cookie's Path is the path it is mounted under, not "/".
//
// Everything a record or a dead letter holds comes from producers and
// brokers (keys, display ids, fingerprints, results, dead-letter ids,
// reasons, errors, headers and bodies) and is only ever shown as text: templates escape it in every context, and a Content-Security-Policy
// lets no script run but the console's own files.
//
// Every list page is one Inspector.List call for a page of records after
// the last one shown (keyset paging by its exact stored key, carried in the
// Next link as an idem.Cursor: never an offset, and never a display id,
// which is cut for ids over 1 KiB), so a page costs what
// the store's List costs: a primary-key range read on the SQL stores, a
// SCAN on Redis. Counting by scope and state (Inspector.Stats) reads every
// record in every store, so the console serves counts from a snapshot at
// most Options.CountsMaxAge old, counting again in the background; the
// benchmark BenchmarkPostgresPages measures both at 1k and 1M records.
package console
