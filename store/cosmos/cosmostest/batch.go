package cosmostest

import "net/http"

// batch serves a transactional batch.
func (s *Server) batch(r *http.Request, c *container, body []byte) response {
	return notModelled("transactional batches")
}
