// Package kafka is the Kafka side of the worker: a Sarama consumer group that
// implements ports.EventSource (key-ordered concurrent handling, offsets
// committed only up to the lowest unfinished record), the
// ports.DeadLetterSink on a dead letter topic, and a Publisher for the demo
// and tests. What a failed record means (retry, dead letter,
// panic recovery) is not decided here: the handler Run is given decides,
// and the worker gives it the policy package's chain.
//
// What the consumer promises an operator (at-least-once commits,
// assignment, lag, read-ahead bounds, dead letters, shutdown, readiness
// and wedging) is in docs/runbook.md, "What the worker does with Kafka",
// in the settings' names; the Config fields of the same names hold them.
// The handler's context carries a ports.Delivery whose Stopping closes
// when the partition stops; Consumer.RunPolicy runs the record policy's
// middlewares around the handler, and each call (each attempt) holds one
// of the MaxInFlight slots.
//
// # Logs
//
// Stable msg names: consumer_started, consumer_stopped, partitions_assigned,
// partitions_released, partition_stopping, record_unfinished,
// dead_letter_value_dropped, dead_letter_stripped, partition_dispatch_paused,
// partition_dispatch_resumed, shutdown_timeout_exceeded, handlers_abandoned,
// handlers_stalled, consume_failed, consumer_error. Record values are never
// logged: they hold customer data.
package kafka
