// Package kafka is the Kafka side of the worker: a Sarama consumer group that
// implements ports.EventSource (key-ordered concurrent handling, offsets
// committed only up to the lowest unfinished record), the
// ports.DeadLetterSink on a dead letter topic, and a Publisher for the demo
// and tests. What a failed record means (retry, dead letter,
// panic recovery) is not decided here: the handler Run is given decides,
// and the worker gives it the policy package's chain.
//
// # Choices an operator should know
//
//   - At-least-once, never at-most-once: a record is marked for commit only
//     after the handler returned nil for it (the worker's handler returns
//     nil once a record is handled or dead-lettered). A record whose
//     handler returned an error is left unmarked, for replay. Marks are
//     committed every CommitInterval, when a
//     partition is revoked (each partition commits what it finished
//     before it is released) and at shutdown. A crash replays what was not
//     committed; the idempotency store makes that harmless.
//   - Cooperative-sticky assignment by default (RebalanceStrategy): a
//     rebalance revokes only the partitions that move, and the others keep
//     being consumed through it. Static membership (GroupInstanceID): a
//     member restarted within SessionTimeout gets its partitions back with
//     no rebalance; it does not leave the group when Run returns.
//   - Lag is read from the broker (high-water mark minus the group's
//     committed offset) every LagInterval and after each commit, so a
//     partition whose records do not finish still shows lag growing.
//   - A new consumer group starts at the oldest record of each partition.
//     A brand-new group id on a topic with long retention therefore replays
//     history older than the idempotency TTL: reuse the group id.
//   - A committed offset past a partition's end (after an unclean leader
//     election or a truncated log) is reset: the partition replays from its
//     oldest record, and the commit follows what is handled from there.
//     Records older than IDEMPOTENCY_TTL are then sent again.
//   - Records with the same key run one after another in offset order;
//     records without a key have no order to keep and run independently.
//     At most MaxInFlight handler calls run at once per worker, and at most
//     4*MaxInFlight records, of at most MaxBufferedBytes together, are
//     taken from the broker and unfinished; past either the consumer stops
//     reading and Sarama stops fetching (a record larger than the whole
//     MaxBufferedBytes is admitted alone). Sarama's own read-ahead is sized
//     from MaxBufferedBytes too: no channel buffer, fetches of
//     MaxBufferedBytes/64 per partition and MaxBufferedBytes/16 per
//     response. Behind one unfinished record, a partition takes in at most
//     64*MaxInFlight offsets (finished ones included) before it stops
//     reading until that record finishes.
//   - The handler's context carries a ports.Delivery whose Stopping closes
//     when the partition stops. Consumer.RunPolicy runs the record policy's
//     middlewares around the handler, and each call of the handler (each
//     attempt) holds one of the MaxInFlight slots; a record waiting between
//     attempts holds none.
//   - While a partition has been failing to write a dead letter through
//     the DeadLetterSink for DeadLetterUnreadyAfter (30s), Ready is false.
//     Dead letters are written by an idempotent producer whose own retries
//     span that time, so a leader election does not write one twice; a
//     record replayed after a rebalance is dead-lettered again.
//     A dead letter the broker refuses as too large is written once more
//     without its value, with a dlq.value_dropped header giving the
//     value's size in bytes; if that is refused too, it is written stripped
//     to the dlq.* headers (no key, none of the record's own headers, the
//     reason cut to 512 bytes), which say where the record is in its source
//     topic.
//   - On shutdown or revoke, no new record starts; records in hand get
//     ShutdownTimeout to finish with a live context, then their context is
//     cancelled and whatever did not finish is left for replay.
//   - Ready is true while the consumer is a member of the group's current
//     session, whether or not it holds partitions (a member beyond the
//     partition count is a spare, and Ready); it is false before the
//     first join and between sessions (an eager rebalance).
//   - A handler still running abandonGrace (1s) after its context was
//     cancelled is abandoned (handlers_abandoned) but keeps its handling
//     slot until it returns. While abandoned calls hold all MaxInFlight
//     slots, Wedged is true and Ready false: nothing can start, and only a
//     restart is sure to help. The worker's /healthz fails then. With
//     Config.StallAfter set, the same holds once any call has run for
//     longer than StallAfter (handlers_stalled, logged when Wedged is
//     read), with no rebalance or shutdown needed to notice: one hung call
//     holds its key's later records and its partition's commit, and once
//     those fill the fetch window, everything.
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
