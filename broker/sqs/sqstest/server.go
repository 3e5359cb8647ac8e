// Package sqstest is an in-process Amazon SQS for tests: a small HTTP
// server on a loopback port that speaks the AWS JSON 1.0 protocol of SQS
// (X-Amz-Target: AmazonSQS.<Operation>) to the real, unmodified
// aws-sdk-go-v2 client, as kfake is for Kafka. GoAWS v0.4.5, the local
// SQS Go projects usually reach for, speaks only the older query protocol,
// which the SDK dropped in service/sqs v1.34: it answers every call of the
// current client with 400 "Bad Request".
//
//	srv, err := sqstest.NewServer()
//	defer srv.Close()
//	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL()),
//		Credentials: aws.AnonymousCredentials{}})
//
// Production code runs against SQS unchanged: only the endpoint differs.
//
// # Fidelity
//
// Each documented SQS behaviour it models, and the test (through the real
// client) that holds it to it:
//
//	Behaviour                                                        Test
//	send (one, batch of at most 10), receive up to 10, delete (one,  TestSendReceiveDelete
//	  batch); MD5OfBody; message attributes as sent; at most 10
//	  attributes a message (InvalidParameterValue past them)
//	visibility timeout: a received message is invisible for it, then TestVisibilityAndReceiveCount
//	  visible again with ApproximateReceiveCount + 1 and a new
//	  receipt handle; ChangeMessageVisibility (0: visible at once)
//	a superseded receipt handle: delete succeeds and deletes         TestStaleReceiptHandle
//	  nothing; visibility change refused (InvalidParameterValue); a
//	  handle never issued: ReceiptHandleIsInvalid; a message visible
//	  again: MessageNotInflight; visibility past 12h from receipt
//	  refused
//	redrive policy: a message received maxReceiveCount times that    TestRedrive
//	  becomes visible again moves, at the next receive, to the
//	  dead-letter queue (same MessageId, body, attributes)
//	FIFO: one message group's messages in send order, none while one TestFIFOGroups
//	  of the group is in flight; several consecutive ones of a group
//	  in one receive; other groups meanwhile; SequenceNumber
//	FIFO: MessageDeduplicationId (or content-based: SHA-256 of the   TestFIFODedup
//	  body) drops a repeat within 5 minutes, answered with the first
//	  copy's MessageId; MessageGroupId and a deduplication id required
//	long polling: WaitTimeSeconds (or the queue's                    TestLongPoll
//	  ReceiveMessageWaitTimeSeconds) returns as soon as a message is
//	  visible; per-message DelaySeconds (standard queues)
//	what it does not model is refused at once (UnsupportedOperation, TestUnmodelledRefusedAtOnce
//	  "sqstest: not modelled: ...")
//
// # What it refuses
//
// Operations other than CreateQueue, GetQueueUrl, GetQueueAttributes,
// DeleteQueue, SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch)
// and ChangeMessageVisibility(Batch); request parameters it does not know
// (ReceiveRequestAttemptId, a MessageGroupId on a standard queue: fair
// queues); and queue attributes other than VisibilityTimeout,
// DelaySeconds, ReceiveMessageWaitTimeSeconds, RedrivePolicy, FifoQueue
// and ContentBasedDeduplication are answered with the SDK's
// *types.UnsupportedOperation, whose message starts with NotModelled. Not
// modelled at all: retention (messages never expire), message size
// limits, high-throughput FIFO, permissions, tags, KMS, redrive allow
// policies and message move tasks. Any credentials (or none) are
// accepted; requests are not signed-checked.
package sqstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// NotModelled starts the message of every refusal of what sqstest does
// not model (the SDK's *types.UnsupportedOperation).
const NotModelled = "sqstest: not modelled: "

// Account and Region are those of every queue's URL and ARN.
const (
	Account = "000000000000"
	Region  = "us-east-1"
)

// Server is an in-process SQS. Its zero value is not usable: NewServer.
type Server struct {
	l    net.Listener
	http *http.Server
	url  string

	mu      sync.Mutex
	queues  map[string]*queue   // by name
	handles map[string]*message // every receipt handle issued
	changed chan struct{}       // closed and replaced on every change
	ids     uint64
	active  map[string]int // requests being served, by the client's address
}

// NewServer starts a server on a loopback port.
func NewServer() (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sqstest: listen: %w", err)
	}
	s := &Server{l: l, url: "http://" + l.Addr().String(), queues: map[string]*queue{},
		handles: map[string]*message{}, changed: make(chan struct{}), active: map[string]int{}}
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go s.http.Serve(l)
	return s, nil
}

// URL is the endpoint to give the client (sqs.Options.BaseEndpoint).
func (s *Server) URL() string { return s.url }

// Close stops the server; long polls in flight end.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		return s.http.Close()
	}
	return nil
}

// Served waits until no request from the client addresses (host:port
// of the client's connections) is being served, or ctx ends: a test that
// stopped a consumer calls it before publishing again, so that a long
// poll the consumer abandoned cannot take a message for nobody (SQS would;
// the message would then stay in flight until its visibility timeout).
func (s *Server) Served(ctx context.Context, addrs ...string) error {
	for {
		s.mu.Lock()
		n := 0
		for _, a := range addrs {
			n += s.active[a]
		}
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// apiError is an SQS error as the JSON protocol carries it.
type apiError struct {
	status int
	code   string // the shape name: __type's
	query  string // the query protocol's code, in X-Amzn-Query-Error
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func errf(status int, code, query, format string, args ...any) *apiError {
	if query == "" {
		query = code
	}
	return &apiError{status: status, code: code, query: query, msg: fmt.Sprintf(format, args...)}
}

func notModelled(format string, args ...any) *apiError {
	return errf(400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", NotModelled+format, args...)
}

func invalidParameter(format string, args ...any) *apiError {
	return errf(400, "InvalidParameterValue", "", format, args...)
}

func noQueue(url string) *apiError {
	return errf(400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue %s does not exist.", url)
}

// ops are the operations served, by X-Amz-Target name.
var ops = map[string]func(s *Server, ctx context.Context, body []byte) (any, error){
	"CreateQueue":                  decoded((*Server).createQueue),
	"GetQueueUrl":                  decoded((*Server).getQueueURL),
	"GetQueueAttributes":           decoded((*Server).getQueueAttributes),
	"DeleteQueue":                  decoded((*Server).deleteQueue),
	"SendMessage":                  decoded((*Server).sendMessage),
	"SendMessageBatch":             decoded((*Server).sendMessageBatch),
	"ReceiveMessage":               decoded((*Server).receiveMessage),
	"DeleteMessage":                decoded((*Server).deleteMessage),
	"DeleteMessageBatch":           decoded((*Server).deleteMessageBatch),
	"ChangeMessageVisibility":      decoded((*Server).changeVisibility),
	"ChangeMessageVisibilityBatch": decoded((*Server).changeVisibilityBatch),
}

// decoded adapts an operation on its decoded input; a parameter the input
// does not know is refused as not modelled.
func decoded[In any](op func(*Server, context.Context, *In) (any, error)) func(*Server, context.Context, []byte) (any, error) {
	return func(s *Server, ctx context.Context, body []byte) (any, error) {
		in := new(In)
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(in); err != nil && !errors.Is(err, io.EOF) {
			if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				return nil, notModelled("parameter %s", f)
			}
			return nil, errf(400, "InvalidParameterValue", "", "malformed request: %v", err)
		}
		return op(s, ctx, in)
	}
}

// ServeHTTP answers one AWS JSON 1.0 request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	name, ok := strings.CutPrefix(target, "AmazonSQS.")
	if r.Method != http.MethodPost || !ok {
		writeErr(w, notModelled("request %s %s (X-Amz-Target %q): only the AWS JSON 1.0 protocol is served", r.Method, r.URL.Path, target))
		return
	}
	op, ok := ops[name]
	if !ok {
		writeErr(w, notModelled("operation %s", name))
		return
	}
	s.mu.Lock()
	s.active[r.RemoteAddr]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.active[r.RemoteAddr]--; s.active[r.RemoteAddr] == 0 {
			delete(s.active, r.RemoteAddr)
		}
		s.mu.Unlock()
	}()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	out, err := op(s, r.Context(), body)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = errf(500, "InternalError", "", "%v", err)
		}
		writeErr(w, ae)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	json.NewEncoder(w).Encode(out)
}

func writeErr(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", e.query+";Sender")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.msg})
}

// changedLocked wakes the long polls; s.mu is held.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// queueOf is the queue at url; s.mu is held.
func (s *Server) queueOf(url string) (*queue, error) {
	i := strings.LastIndexByte(url, '/')
	if q := s.queues[url[i+1:]]; q != nil && q.url == url {
		return q, nil
	}
	return nil, noQueue(url)
}
