package sqstest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/broker/sqs/sqstest"
)

func setup(t *testing.T) (*sqs.Client, context.Context) {
	t.Helper()
	srv, err := sqstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c := sqs.New(sqs.Options{Region: sqstest.Region, BaseEndpoint: aws.String(srv.URL()), Credentials: aws.AnonymousCredentials{}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

func create(t *testing.T, c *sqs.Client, ctx context.Context, name string, attrs map[string]string) string {
	t.Helper()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return *out.QueueUrl
}

func arn(t *testing.T, c *sqs.Client, ctx context.Context, url string) string {
	t.Helper()
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes["QueueArn"]
}

func send(t *testing.T, c *sqs.Client, ctx context.Context, in *sqs.SendMessageInput) *sqs.SendMessageOutput {
	t.Helper()
	out, err := c.SendMessage(ctx, in)
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	return out
}

func receive(t *testing.T, c *sqs.Client, ctx context.Context, url string, n int32, vis int32) []types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: n, VisibilityTimeout: vis,
		MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func TestSendReceiveDelete(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "orders", nil)
	out := send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("one"),
		MessageAttributes: map[string]types.MessageAttributeValue{"tenant": str("acme"),
			"bin": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}}}})
	if out.MessageId == nil || *out.MD5OfMessageBody == "" {
		t.Fatalf("send answered %+v", out)
	}
	var entries []types.SendMessageBatchRequestEntry
	for i := range 10 {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(fmt.Sprint("b", i))})
	}
	bout, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q), Entries: entries})
	if err != nil || len(bout.Successful) != 10 {
		t.Fatalf("SendMessageBatch: %v %+v", err, bout)
	}
	msgs := receive(t, c, ctx, q, 10, 30)
	if len(msgs) != 10 || *msgs[0].Body != "one" || *msgs[0].MessageAttributes["tenant"].StringValue != "acme" ||
		string(msgs[0].MessageAttributes["bin"].BinaryValue) != "\x00\x01\x02" {
		t.Fatalf("received %d, first %+v", len(msgs), msgs[0])
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: msgs[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	var del []types.DeleteMessageBatchRequestEntry
	for i, m := range msgs[1:] {
		del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	dout, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q), Entries: del})
	if err != nil || len(dout.Successful) != 9 {
		t.Fatalf("DeleteMessageBatch: %v %+v", err, dout)
	}
	if rest := receive(t, c, ctx, q, 10, 30); len(rest) != 1 || *rest[0].Body != "b9" {
		t.Fatalf("after deleting ten of eleven, received %d", len(rest))
	}
	attrs := map[string]types.MessageAttributeValue{}
	for i := range 11 {
		attrs[fmt.Sprint("a", i)] = str("x")
	}
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x"), MessageAttributes: attrs})
	if err == nil || !strings.Contains(err.Error(), "InvalidParameterValue") {
		t.Fatalf("eleven attributes: %v, want InvalidParameterValue", err)
	}
}

func TestVisibilityAndReceiveCount(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "v", map[string]string{"VisibilityTimeout": "1"})
	send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x")})
	first := receive(t, c, ctx, q, 1, 0)
	if len(first) != 1 || first[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("first receive %+v", first)
	}
	if again := receive(t, c, ctx, q, 1, 0); len(again) != 0 {
		t.Fatal("an in-flight message received again")
	}
	// VisibilityTimeout 0 on the queue is the request's: wait it out.
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), WaitTimeSeconds: 3,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{"ApproximateReceiveCount"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("after the visibility timeout: %v, %d messages", err, len(out.Messages))
	}
	m := out.Messages[0]
	if m.Attributes["ApproximateReceiveCount"] != "2" || *m.ReceiptHandle == *first[0].ReceiptHandle {
		t.Fatalf("second receive: count %s, handle new: %v", m.Attributes["ApproximateReceiveCount"], *m.ReceiptHandle != *first[0].ReceiptHandle)
	}
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	if third := receive(t, c, ctx, q, 1, 30); len(third) != 1 || third[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("after ChangeMessageVisibility 0: %+v", third)
	}
}

func TestStaleReceiptHandle(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "stale", nil)
	send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x")})
	old := receive(t, c, ctx, q, 1, 30)[0]
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q), ReceiptHandle: old.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	// Visible again, the handle still its current one: not in flight.
	_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q), ReceiptHandle: old.ReceiptHandle, VisibilityTimeout: 5})
	var notInflight *types.MessageNotInflight
	if !errors.As(err, &notInflight) {
		t.Fatalf("visibility change of a visible message: %v, want MessageNotInflight", err)
	}
	cur := receive(t, c, ctx, q, 1, 30)[0]
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: old.ReceiptHandle}); err != nil {
		t.Fatalf("delete with a superseded handle: %v, want success", err)
	}
	_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q), ReceiptHandle: old.ReceiptHandle, VisibilityTimeout: 5})
	if err == nil || !strings.Contains(err.Error(), "InvalidParameterValue") {
		t.Fatalf("visibility change with a superseded handle: %v, want InvalidParameterValue", err)
	}
	_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q), ReceiptHandle: cur.ReceiptHandle, VisibilityTimeout: 43200})
	if err == nil {
		t.Fatal("visibility past 12 hours from the receive accepted")
	}
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: aws.String("never-issued")})
	var invalid *types.ReceiptHandleIsInvalid
	if !errors.As(err, &invalid) {
		t.Fatalf("delete with a handle never issued: %v, want ReceiptHandleIsInvalid", err)
	}
	// The superseded delete deleted nothing: the current handle still does.
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: cur.ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	a, _ := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q), AttributeNames: []types.QueueAttributeName{"All"}})
	if a.Attributes["ApproximateNumberOfMessages"] != "0" || a.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" {
		t.Fatalf("queue not empty: %v", a.Attributes)
	}
}

func TestRedrive(t *testing.T) {
	c, ctx := setup(t)
	dlq := create(t, c, ctx, "dlq", nil)
	q := create(t, c, ctx, "src", map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"2"}`, arn(t, c, ctx, dlq))})
	sent := send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x"),
		MessageAttributes: map[string]types.MessageAttributeValue{"Idem-Id": str("order-1")}})
	for i := 1; i <= 2; i++ {
		m := receive(t, c, ctx, q, 1, 30)
		if len(m) != 1 || m[0].Attributes["ApproximateReceiveCount"] != strconv.Itoa(i) {
			t.Fatalf("receive %d: %+v", i, m)
		}
		c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q), ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 0})
	}
	if m := receive(t, c, ctx, q, 1, 30); len(m) != 0 {
		t.Fatalf("received past maxReceiveCount: %+v", m)
	}
	m := receive(t, c, ctx, dlq, 1, 30)
	if len(m) != 1 || *m[0].MessageId != *sent.MessageId || *m[0].MessageAttributes["Idem-Id"].StringValue != "order-1" {
		t.Fatalf("dead-letter queue holds %+v", m)
	}
}

func TestFIFOGroups(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "f.fifo", map[string]string{"FifoQueue": "true"})
	for i := range 6 {
		send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(fmt.Sprint(i)),
			MessageGroupId: aws.String(fmt.Sprint("g", i%2)), MessageDeduplicationId: aws.String(fmt.Sprint("d", i))})
	}
	first := receive(t, c, ctx, q, 2, 30)
	if len(first) != 2 || *first[0].Body != "0" || *first[1].Body != "1" {
		t.Fatalf("first receive: %+v", first)
	}
	// Both groups are in flight: nothing more.
	if m := receive(t, c, ctx, q, 10, 30); len(m) != 0 {
		t.Fatalf("received %d while both groups are in flight", len(m))
	}
	c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q), ReceiptHandle: first[0].ReceiptHandle})
	// g0 is free: its next two come, in order, in one receive.
	m := receive(t, c, ctx, q, 10, 30)
	if len(m) != 2 || *m[0].Body != "2" || *m[1].Body != "4" || m[0].Attributes["MessageGroupId"] != "g0" {
		t.Fatalf("after deleting g0's first: %+v", m)
	}
	if s0, s1 := m[0].Attributes["SequenceNumber"], m[1].Attributes["SequenceNumber"]; s0 == "" || s0 >= s1 {
		t.Fatalf("sequence numbers %q, %q", s0, s1)
	}
}

func TestFIFODedup(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "d.fifo", map[string]string{"FifoQueue": "true"})
	a := send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("same")})
	b := send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("y"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("same")})
	if *a.MessageId != *b.MessageId {
		t.Fatalf("a repeat of a deduplication id got a MessageId of its own")
	}
	if m := receive(t, c, ctx, q, 10, 30); len(m) != 1 || *m[0].Body != "x" {
		t.Fatalf("received %+v, want the first copy alone", m)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x"), MessageGroupId: aws.String("g")}); err == nil {
		t.Fatal("a send without a deduplication id accepted on a queue without content-based deduplication")
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("z")}); err == nil {
		t.Fatal("a send without MessageGroupId accepted on a FIFO queue")
	}
	cb := create(t, c, ctx, "cb.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	for range 2 {
		send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(cb), MessageBody: aws.String("same body"), MessageGroupId: aws.String("g")})
	}
	if m := receive(t, c, ctx, cb, 10, 30); len(m) != 1 {
		t.Fatalf("content-based deduplication let %d copies through", len(m))
	}
}

func TestLongPoll(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "lp", nil)
	go func() {
		time.Sleep(200 * time.Millisecond)
		c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("late")})
	}()
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), WaitTimeSeconds: 20})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("long poll: %v, %d messages", err, len(out.Messages))
	}
	send(t, c, ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("delayed"), DelaySeconds: 1})
	if m := receive(t, c, ctx, q, 1, 30); len(m) != 0 {
		t.Fatal("a delayed message received at once")
	}
	out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), WaitTimeSeconds: 5})
	if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "delayed" {
		t.Fatalf("after the delay: %v, %+v", err, out)
	}
}

// What sqstest does not model is refused at once, naming it.
func TestUnmodelledRefusedAtOnce(t *testing.T) {
	c, ctx := setup(t)
	q := create(t, c, ctx, "u", nil)
	calls := map[string]func() error{
		"ListQueues": func() error { _, err := c.ListQueues(ctx, &sqs.ListQueuesInput{}); return err },
		"queue attribute": func() error {
			_, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("k"), Attributes: map[string]string{"KmsMasterKeyId": "x"}})
			return err
		},
		"ReceiveRequestAttemptId": func() error {
			_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), ReceiveRequestAttemptId: aws.String("a")})
			return err
		},
		"fair queues": func() error {
			_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
			return err
		},
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		var unsupported *types.UnsupportedOperation
		if !errors.As(err, &unsupported) || !strings.Contains(err.Error(), sqstest.NotModelled) || time.Since(start) > time.Second {
			t.Errorf("%s: %v after %v, want UnsupportedOperation naming it within a second", name, err, time.Since(start))
		}
	}
}
