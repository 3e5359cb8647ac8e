package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	sqsidem "github.com/idemgo/idem/broker/sqs"
)

// sqsQueue reads a dead-letter queue the only way SQS allows, by receiving
// its messages: each read makes them invisible for a moment and then
// visible again at once (ChangeMessageVisibility 0), as the AWS console's
// "poll for messages" does; each read counts one receive of each message
// (ApproximateReceiveCount), which matters only if the dead-letter queue
// has a redrive policy of its own. Replay sends a selected one back with
// sqsidem.Replay and deletes it.
type sqsQueue struct {
	client     *sqs.Client
	url        string // the endpoint, for names
	dlq, queue string // queue URLs
}

// sqsHold is how long a read keeps the messages it received invisible
// before it makes them visible again: a crash mid-read leaves them hidden
// this long at most.
const sqsHold = 60

// OpenSQS opens sqs://[HOST[:PORT]]?dlq=QUEUE[&queue=Q][&region=R]: QUEUE
// is the dead-letter queue's name or URL, Q the consumed one's (Horizon).
// HOST is the SQS endpoint (HTTPS; plain HTTP on a loopback address, as
// local emulators and sqstest serve); without one, AWS's endpoint of the
// region. The region is ?region=, else the endpoint's
// (sqs.REGION.amazonaws.com), else $AWS_REGION or $AWS_DEFAULT_REGION.
// Credentials come from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and
// $AWS_SESSION_TOKEN; without them requests go unsigned (local endpoints).
func OpenSQS(ctx context.Context, u *url.URL, _ string) (Queue, error) {
	params := u.Query()
	name := u.Redacted()
	if params.Get("dlq") == "" && params.Get("queue") == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=QUEUE (the dead-letter queue's name or URL)", ErrBadURL, name)
	}
	opts := sqs.Options{Region: sqsRegion(u.Hostname(), params.Get("region")), Credentials: aws.AnonymousCredentials{}}
	if id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		opts.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), Source: "environment"}, nil
		})
	}
	if opts.Region == "" {
		return nil, fmt.Errorf("%w: %s names no region: add ?region=R, or set AWS_REGION", ErrBadURL, name)
	}
	q := &sqsQueue{url: "sqs://" + u.Host}
	if u.Host != "" {
		scheme := "https"
		if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || ip != nil && ip.IsLoopback() {
			scheme = "http"
		}
		opts.BaseEndpoint = aws.String(scheme + "://" + u.Host)
	} else {
		q.url = "SQS " + opts.Region
	}
	q.client = sqs.New(opts)
	var err error
	if q.dlq, err = q.queueURL(ctx, params.Get("dlq")); err != nil {
		return nil, err
	}
	if q.queue, err = q.queueURL(ctx, params.Get("queue")); err != nil {
		return nil, err
	}
	return q, nil
}

// sqsRegion is the region given, else the endpoint's, else the
// environment's.
func sqsRegion(host, given string) string {
	if given != "" {
		return given
	}
	if rest, ok := strings.CutPrefix(host, "sqs."); ok {
		if region, _, ok := strings.Cut(rest, "."); ok && strings.HasSuffix(host, ".amazonaws.com") {
			return region
		}
	}
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	if r := os.Getenv("AWS_DEFAULT_REGION"); r != "" {
		return r
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return "us-east-1" // a local endpoint takes any
	}
	return ""
}

// queueURL is a queue's URL from its name (GetQueueUrl) or its URL.
func (q *sqsQueue) queueURL(ctx context.Context, nameOrURL string) (string, error) {
	if nameOrURL == "" || strings.Contains(nameOrURL, "://") {
		return nameOrURL, nil
	}
	out, err := q.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(nameOrURL)})
	if err != nil {
		return "", fmt.Errorf("queue %s at %s: %w", nameOrURL, q.url, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

func (q *sqsQueue) Name() string { return "SQS queue " + q.dlq }

func (q *sqsQueue) Close() error { return nil }

// each receives every message of the dead-letter queue visible at the
// call's start, calls f with each (until it returns false), and makes
// every one f did not take visible again. A message f takes is f's to
// delete.
func (q *sqsQueue) each(ctx context.Context, f func(m types.Message, dl DeadLetter) (more, took bool)) error {
	if q.dlq == "" {
		return fmt.Errorf("%w: %s has no ?dlq=QUEUE (the dead-letter queue)", ErrBadURL, q.url)
	}
	attrs, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.dlq),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		return fmt.Errorf("dead-letter queue %s: %w", q.dlq, err)
	}
	want, _ := strconv.Atoi(attrs.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	var held []types.Message
	defer func() {
		// Visible again at once, even when ctx ended: hidden, they would
		// wait out sqsHold.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, m := range held {
			_, _ = q.client.ChangeMessageVisibility(bctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.dlq),
				ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		}
	}()
	seen := map[string]bool{}
	for got := 0; ; {
		in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.dlq), MaxNumberOfMessages: 10, VisibilityTimeout: sqsHold,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}}
		if got >= want {
			in.WaitTimeSeconds = 1 // short polls can miss messages on SQS: one long poll says the queue is read
		}
		out, err := q.client.ReceiveMessage(ctx, in)
		if err != nil {
			return fmt.Errorf("read %s: %w", q.dlq, err)
		}
		if len(out.Messages) == 0 {
			if got >= want {
				return nil
			}
			want = got // fewer than the approximate count: one long poll more
			continue
		}
		more := true
		for _, m := range out.Messages {
			if !more || seen[aws.ToString(m.MessageId)] {
				held = append(held, m) // after the last f wants, or back from a read made visible meanwhile
				continue
			}
			seen[aws.ToString(m.MessageId)] = true
			got++
			var took bool
			more, took = f(m, sqsDeadLetter(m))
			if !took {
				held = append(held, m)
			}
		}
		if !more {
			return nil
		}
	}
}

// sqsReasonRedrive is the reason shown for a message SQS moved to the
// dead-letter queue itself (its redrive policy's maxReceiveCount): it
// carries none of idem's attributes.
const sqsReasonRedrive = "sqs_redrive"

func sqsDeadLetter(m types.Message) DeadLetter {
	im, err := sqsidem.DeadLetterOf(&m)
	h := im.Headers
	if h == nil {
		h = map[string]string{}
	}
	dl := deadLetterOf(aws.ToString(m.MessageId), h, []byte(aws.ToString(m.Body)))
	dl.Source = h[sqsidem.HeaderQueue]
	if errors.Is(err, sqsidem.ErrNotDeadLetter) && dl.Reason == "" {
		dl.Reason = sqsReasonRedrive
	}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		dl.At = time.UnixMilli(ms)
	}
	return dl
}

func (q *sqsQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.each(ctx, func(_ types.Message, dl DeadLetter) (bool, bool) {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit, false
	})
	return out, err
}

// Replay sends each selected dead letter back to its queue with
// sqsidem.Replay and deletes it. A message SQS moved itself (no idem
// attributes) goes back as it is to ?queue=, when the URL names one.
func (q *sqsQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	want := idSet(ids)
	return q.each(ctx, func(m types.Message, dl DeadLetter) (bool, bool) {
		if !want[dl.ID] {
			return true, false
		}
		delete(want, dl.ID)
		err := sqsidem.Replay(ctx, q.client, &m)
		if errors.Is(err, sqsidem.ErrNotDeadLetter) {
			err = q.sendBack(ctx, m)
		}
		if err == nil {
			if _, err = q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.dlq), ReceiptHandle: m.ReceiptHandle}); err != nil {
				err = fmt.Errorf("replayed, but not deleted from %s (it would be replayed again): %w", q.dlq, err)
			}
		}
		done(dl, err)
		return len(want) > 0, err == nil
	})
}

// sendBack sends a message SQS moved itself to ?queue=, as it is.
func (q *sqsQueue) sendBack(ctx context.Context, m types.Message) error {
	if q.queue == "" {
		return fmt.Errorf("%w: SQS moved it here itself (redrive policy): name the queue to send it back to with ?queue=Q", sqsidem.ErrNotDeadLetter)
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.queue), MessageBody: m.Body, MessageAttributes: m.MessageAttributes}
	if strings.HasSuffix(q.queue, ".fifo") {
		in.MessageGroupId = aws.String(m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)])
		in.MessageDeduplicationId = m.MessageId
	}
	_, err := q.client.SendMessage(ctx, in)
	return err
}

// Horizon reads the consumed queue's redrive budget (maxReceiveCount ×
// VisibilityTimeout) and the retention (MessageRetentionPeriod) of both
// queues.
func (q *sqsQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	var (
		spans []Span
		notes []error
	)
	for _, qu := range []struct {
		url  string
		dead bool
	}{{q.queue, false}, {q.dlq, true}} {
		if qu.url == "" {
			continue
		}
		out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(qu.url),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			return nil, nil, fmt.Errorf("queue %s: %w", qu.url, err)
		}
		a := out.Attributes
		what := "queue " + qu.url
		if qu.dead {
			what = "dead-letter queue " + qu.url
		}
		if s, ok := a[string(types.QueueAttributeNameMessageRetentionPeriod)]; ok {
			n, _ := strconv.Atoi(s)
			spans = append(spans, Span{What: what + ": MessageRetentionPeriod", Duration: time.Duration(n) * time.Second, DeadLetters: qu.dead})
		} else {
			notes = append(notes, fmt.Errorf("%w: %s: the server gives no MessageRetentionPeriod (SQS keeps messages 4 days by default, 14 at most): pass the dead letters' longest wait as --redelivery-horizon", ErrNotReadable, what))
		}
		if qu.dead {
			continue
		}
		vis, _ := strconv.Atoi(a[string(types.QueueAttributeNameVisibilityTimeout)])
		var policy struct {
			MaxReceiveCount json.Number `json:"maxReceiveCount"`
		}
		if rp := a[string(types.QueueAttributeNameRedrivePolicy)]; rp != "" && json.Unmarshal([]byte(rp), &policy) == nil {
			n, _ := policy.MaxReceiveCount.Int64()
			spans = append(spans, Span{What: fmt.Sprintf("%s: redrive maxReceiveCount %d × VisibilityTimeout %ds", what, n, vis),
				Duration: time.Duration(n*int64(vis)) * time.Second, Budget: true})
		} else {
			spans = append(spans, Span{What: what + ": no redrive policy: SQS redelivers a message until it expires (the consumer's MaxDeliveries bounds it)", Unbounded: true, Budget: true})
		}
	}
	return spans, notes, nil
}

var _ Horizoner = (*sqsQueue)(nil)
