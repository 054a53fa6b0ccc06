package main

import (
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// channels is the worker's one table of channels, in the order a fan-out
// sends them. Every list of channels derives from it: the recipient fields
// an event may give and the blocks its templates define (the
// domain.Channel of each row), the notifiers Open builds, the metrics'
// series, the key command's keys. Adding a channel is a row here.
var channels = []channel{
	{domain.SMS, "SMS_NOTIFIER", map[string]openNotifier{"twilio": (*Main).openTwilio, "console": (*Main).openConsole}},
	{domain.Email, "EMAIL_NOTIFIER", map[string]openNotifier{"smtp": (*Main).openSMTP, "console": (*Main).openConsole}},
}

// channel is one row of channels: the channel as the domain knows it, and
// the notifiers that can send on it.
type channel struct {
	domain.Channel
	// Variable names the notifier of the channel (config resolves its
	// value, Config.Notifier).
	Variable string
	// Notifiers build each notifier by the name Variable takes.
	Notifiers map[string]openNotifier
}

// openNotifier builds one notifier from m.Config.
type openNotifier func(m *Main) (ports.Notifier, error)

// domainChannels returns the domain's half of every row of channels.
func domainChannels() []domain.Channel {
	out := make([]domain.Channel, len(channels))
	for n, c := range channels {
		out[n] = c.Channel
	}
	return out
}

// channelNames returns the name of every row of channels.
func channelNames() []ports.Channel {
	out := make([]ports.Channel, len(channels))
	for n, c := range channels {
		out[n] = c.Name
	}
	return out
}
