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
