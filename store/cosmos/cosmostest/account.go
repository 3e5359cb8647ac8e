package cosmostest

import "net/http"

// region is the one region the account has.
const region = "cosmostest"

// serveAccount answers the account read (GET /) the client makes before
// its first request: one region, readable and writable at the server's own
// endpoint, single-region writes, Session consistency.
func (s *Server) serveAccount(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "the account resource is read with GET")
		return
	}
	loc := []map[string]string{{"name": region, "databaseAccountEndpoint": s.URL()}}
	jsonResponse(http.StatusOK, map[string]any{
		"id":                           "cosmostest",
		"_rid":                         s.http.Listener.Addr().String(),
		"_self":                        "",
		"_dbs":                         "//dbs/",
		"media":                        "//media/",
		"addresses":                    "//addresses/",
		"writableLocations":            loc,
		"readableLocations":            loc,
		"enableMultipleWriteLocations": false,
		"userConsistencyPolicy":        map[string]string{"defaultConsistencyLevel": accountConsistency},
		"userReplicationPolicy":        map[string]int{"minReplicaSetSize": 1, "maxReplicasetSize": 1},
		"systemReplicationPolicy":      map[string]int{"minReplicaSetSize": 1, "maxReplicasetSize": 1},
		"readPolicy":                   map[string]int{"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
	}).write(w)
}
