//go:build devbroker

package main

import "github.com/harborlight/notification-worker/internal/devbroker"

// A development build (go build -tags devbroker; `make run`) links the
// in-process broker for EVENT_SOURCE=embedded and the demo.
func init() { embeddedBroker = devbroker.Starter(embeddedPartitions) }
