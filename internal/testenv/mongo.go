package testenv

// Mongo is a server speaking the MongoDB wire protocol at IDEM_MONGO_URL.
// Tests do not need it: internal/ferretdbtest embeds FerretDB v1 over SQLite
// in the test process when IDEM_MONGO_URL is unset. Set it to run them on
// another server, such as a MongoDB replica set (which runs the
// transactional cases too).
var Mongo = Service{"MongoDB-API server", "IDEM_MONGO_URL", "mongodb://127.0.0.1:27017/",
	"unset IDEM_MONGO_URL to use the embedded FerretDB, or start one: mongod --replSet rs0 --dbpath DIR, " +
		"or ferretdb --handler=sqlite --sqlite-url=file:$(mktemp -d)/ --listen-addr=127.0.0.1:27017 --debug-addr=- --telemetry=disable"}
