package main

import (
	"github.com/harborlight/notification-worker/adapters/push"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// channels is the worker's one table of channels, in the order a fan-out
// sends them. Every list of channels derives from it: the recipient fields
// an event may give and the blocks its templates define (the
// domain.Channel of each row), the notifiers Open builds, the metrics'
// series, the key command's keys. Adding a channel is a row here, its
// provider among config.Providers.
var channels = []channel{
	provided(domain.SMS, twilio.Provider),
	provided(domain.Email, smtp.Provider),
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
	// Provider is the channel's notifier adapter, which declares and
	// reads its own settings: unless it is AlwaysOn, the channel is off
	// when Variable resolves to "".
	Provider ports.Provider
}

// openNotifier builds one notifier from m.Config.
type openNotifier func(m *Main) (ports.Notifier, error)

// provided is the row of a channel whose notifier is p or the console.
func provided(ch domain.Channel, p ports.Provider) channel {
	return channel{Channel: ch, Variable: p.Variable, Provider: p, Notifiers: map[string]openNotifier{
		p.Name: func(m *Main) (ports.Notifier, error) {
			return p.Open(m.Config.Settings(), ports.NotifierEnv{SendTimeout: m.Config.SendTimeout, MaxConns: m.Config.MaxInFlight})
		},
		"console": (*Main).openConsole,
	}}
}

// active returns the rows of channels the worker offers with cfg and d:
// all but those of a provider that is off (not AlwaysOn, its variable
// resolved to "") and not given a notifier by d.
func active(cfg config.Config, d Deps) []channel {
	var out []channel
	for _, c := range channels {
		if c.Provider.AlwaysOn || cfg.Notifier(c.Variable) != "" || d.Notifiers[c.Name] != nil {
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
