package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem/store/mysql"
)

// TestRetryDeadlocks: the store's own transactions are retried on InnoDB's
// deadlock, at most five times in all, and then fail with the deadlock
// wrapped; any other error, and a context ended between attempts, stop the
// retries at once.
func TestRetryDeadlocks(t *testing.T) {
	deadlock := &gomysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	calls := 0
	err := mysql.Retry(context.Background(), func() error { calls++; return deadlock })
	var me *gomysql.MySQLError
	if calls != 5 || !errors.As(err, &me) || me.Number != 1213 || !strings.Contains(err.Error(), "gave up after 5 attempts") {
		t.Fatalf("always deadlocked: %d calls, %v; want 5 and the deadlock wrapped", calls, err)
	}

	calls = 0
	err = mysql.Retry(context.Background(), func() error {
		if calls++; calls < 3 {
			return deadlock
		}
		return nil
	})
	if calls != 3 || err != nil {
		t.Fatalf("deadlocked twice: %d calls, %v; want 3 and success", calls, err)
	}

	calls = 0
	timeout := &gomysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	if err := mysql.Retry(context.Background(), func() error { calls++; return timeout }); calls != 1 || !errors.Is(err, timeout) {
		t.Fatalf("lock wait timeout: %d calls, %v; want 1, not retried", calls, err)
	}

	calls = 0
	ctx, cancel := context.WithCancel(context.Background())
	err = mysql.Retry(ctx, func() error { calls++; cancel(); return deadlock })
	if calls != 1 || !errors.Is(err, deadlock) || strings.Contains(err.Error(), "gave up") {
		t.Fatalf("context ended: %d calls, %v; want 1 and the deadlock as it is", calls, err)
	}
}
