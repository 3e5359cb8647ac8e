package testenv

// Mongo is a server speaking the MongoDB wire protocol. The tests run on
// FerretDB v1 over SQLite (.ci/run builds and starts it); a MongoDB replica
// set at IDEM_MONGO_URL runs the transactional cases too.
var Mongo = Service{"MongoDB-API server (FerretDB)", "IDEM_MONGO_URL", "mongodb://127.0.0.1:27017/",
	"bash .ci/run builds FerretDB v1.24.2 and starts it, or by hand: " +
		"ferretdb --handler=sqlite --sqlite-url=file:$(mktemp -d)/ --listen-addr=127.0.0.1:27017 --debug-addr=- --telemetry=disable"}
