// Package amqpprop reads AMQP 1.0 application properties as idem's
// headers: the Azure messaging adapters (Service Bus, Event Hubs) share it.
package amqpprop

import (
	"fmt"
	"time"
)

// Text is an application property's value as a header: strings and
// binary as they are, timestamps in RFC 3339 (UTC), nil as "", the rest
// as fmt prints them.
func Text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
