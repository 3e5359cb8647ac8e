package sqsidem_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/store/memory"
)

// A billing service consumes the orders queue and charges each order
// once, however often SQS delivers it (a visibility timeout that ran out,
// a producer that sent an order twice). Conflicts and orders rejected for
// good go to orders-dlq with the reason in Idem-Reason; MaxDeliveries is
// left 0, so Run reads the queue's redrive policy and dead-letters a
// message itself, with idem's headers, on the receive SQS would move it
// on. Use a durable store (store/postgres, store/redis) in production.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client := sqs.New(sqs.Options{Region: "eu-west-1"}) // credentials from your aws.Config in production
	queue := "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"

	g, err := sqsidem.NewGuard(memory.New(), queue, idem.Options{}) // scope: "orders"
	if err != nil {
		log.Fatal(err)
	}
	h := sqsidem.Handle(func(ctx context.Context, m *types.Message) ([]byte, error) {
		return charge(ctx, idem.DeriveKey(ctx, "charge"), sqsidem.MessageOf(m).Payload)
	})
	err = sqsidem.Consume(ctx, client, g, h, sqsidem.Options{ // or NewConsumer + Run
		Concurrency:        8,
		QueueURL:           queue,
		DeadLetterQueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq",
	})
	if err != nil {
		log.Fatal(err) // a misconfiguration, found before any message is received, or SQS's error
	}
}

// The producer of a FIFO queue sends with Send: the order id travels in
// Idem-Id (the consumers' key), and MessageDeduplicationId is
// idem.DedupID(id, fingerprint), so SQS drops a retry of the same content
// within five minutes but never an id reused with other content.
func ExampleSend() {
	ctx := context.Background()
	client := sqs.New(sqs.Options{Region: "eu-west-1"})
	_, err := sqsidem.Send(ctx, client, "order-1042", &sqs.SendMessageInput{
		QueueUrl:       aws.String("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"),
		MessageBody:    aws.String(`{"order":1042,"amount":30}`),
		MessageGroupId: aws.String("customer-7"), // the order kept: per customer
	})
	if err != nil {
		log.Fatal(err)
	}
}

func charge(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil }
