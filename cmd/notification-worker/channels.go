package main

import (
	"maps"
	"slices"

	"github.com/harborlight/notification-worker/adapters/push"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// channels is the worker's one table of channels, in the order a fan-out
// sends them. Every list of channels derives from it: the recipient fields
// an event may give and the blocks its templates define (the
// domain.Channel of each row), the notifiers Open builds, the metrics'
// series, the key command's keys. Adding a channel is a row here.
var channels = []channel{
	{Channel: domain.SMS, Variable: "SMS_NOTIFIER", Notifiers: map[string]openNotifier{"twilio": (*Main).openTwilio, "console": (*Main).openConsole}},
	{Channel: domain.Email, Variable: "EMAIL_NOTIFIER", Notifiers: map[string]openNotifier{"smtp": (*Main).openSMTP, "console": (*Main).openConsole}},
	provided(push.Channel, push.Provider),
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
	// Provider is set for a channel whose notifier adapter declares and
	// reads its own settings (see provided): the channel is off when
	// Variable resolves to "".
	Provider *ports.Provider
}

// openNotifier builds one notifier from m.Config.
type openNotifier func(m *Main) (ports.Notifier, error)

// provided is the row of a channel whose notifier is p, an adapter that
// reads its own settings (ports.Provider), or the console.
func provided(ch domain.Channel, p ports.Provider) channel {
	return channel{Channel: ch, Variable: p.Variable, Provider: &p, Notifiers: map[string]openNotifier{
		p.Name: func(m *Main) (ports.Notifier, error) {
			return p.Open(m.Config.Settings(), ports.NotifierEnv{SendTimeout: m.Config.SendTimeout, MaxConns: m.Config.Kafka.MaxInFlight})
		},
		"console": (*Main).openConsole,
	}}
}

// providers returns the Provider of every row of channels and of every
// entry of stores that has one, for config.LoadWorker.
func providers() []ports.Provider {
	var out []ports.Provider
	for _, c := range channels {
		if c.Provider != nil {
			out = append(out, *c.Provider)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		if p := stores[name].provider; p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// active returns the rows of channels the worker offers with cfg and d:
// all but those of a provider that is off (its variable resolved to "")
// and not given a notifier by d.
func active(cfg config.Config, d Deps) []channel {
	var out []channel
	for _, c := range channels {
		if c.Provider == nil || cfg.Notifier(c.Variable) != "" || d.Notifiers[c.Name] != nil {
			out = append(out, c)
		}
	}
	return out
}

// domainChannels returns the domain's half of each row of rows.
func domainChannels(rows []channel) []domain.Channel {
	out := make([]domain.Channel, len(rows))
	for n, c := range rows {
		out[n] = c.Channel
	}
	return out
}

// channelNames returns the name of each row of rows.
func channelNames(rows []channel) []ports.Channel {
	out := make([]ports.Channel, len(rows))
	for n, c := range rows {
		out[n] = c.Name
	}
	return out
}
