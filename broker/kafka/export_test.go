package kafka

// GuardMessage is guardMessage, for the tests.
var GuardMessage = guardMessage

// Lite reports whether c reads records with guardMessage.
func (c *Consumer) Lite() bool { return c.lite }
