package servicebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

// testLock is the queues' lock duration: short, so that a killed
// consumer's messages come back soon; renewed every third of it.
const testLock = 2 * time.Second

func newServer(t *testing.T) *servicebustest.Server {
	t.Helper()
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func newClient(t *testing.T, srv *servicebustest.Server) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return client
}

// dedupQueue is a server with a queue "orders" with duplicate detection
// (Service Bus's default window), a client and a sender on it.
func dedupQueue(t *testing.T) (*servicebustest.Server, *azservicebus.Client, *azservicebus.Sender) {
	t.Helper()
	srv := newServer(t)
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{RequiresDuplicateDetection: true, LockDuration: testLock}); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, srv)
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, client, s
}
