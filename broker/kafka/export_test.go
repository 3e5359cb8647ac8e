package kafka

import "time"

// SetConsumerWait shortens how long a ClientOptions client waits for its
// Consumer (ConsumerWait) until the returned restore is called.
func SetConsumerWait(d time.Duration) (restore func()) {
	old := consumerWait.Swap(int64(d))
	return func() { consumerWait.Store(old) }
}
