package main

import (
	"github.com/harborlight/notification-worker/adapters/console"
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
// domain.ChannelSpec of each row), the notifiers Open builds, the metrics'
// series, the key command's keys. Adding a channel is a row here, its
// provider among config.Providers.
var channels = []route{
	{domain.SMS, twilio.Provider},
	{domain.Email, smtp.Provider},
	{push.Channel, push.Provider},
}

// route is one row of channels: how a channel's messages go out, the
// channel as the domain knows it (its ChannelSpec) and the adapter of its
// notifier, which declares and reads its own settings.
// Its Variable chooses the notifier (config resolves it, Config.Notifier):
// the Provider, or the console; unless it is AlwaysOn, the channel is off
// when Variable resolves to "".
type route struct {
	domain.ChannelSpec
	Provider ports.Provider
}

// openNotifier builds the notifier named, the console or ch's Provider.
func (m *Main) openNotifier(ch route, name string) (ports.Notifier, error) {
	if name == "console" {
		return console.New(m.Stdout), nil
	}
	return ch.Provider.Open(m.Config.Settings(), ports.NotifierEnv{SendTimeout: m.Config.SendTimeout, MaxConns: m.Config.MaxInFlight})
}

// active returns the rows of channels the worker offers with cfg and d:
// all but those of a provider that is off (not AlwaysOn, its variable
// resolved to "") and not given a notifier by d.
func active(cfg config.Config, d Deps) []route {
	var out []route
	for _, c := range channels {
		if c.Provider.AlwaysOn || cfg.Notifier(c.Provider.Variable) != "" || d.Notifiers[c.Name] != nil {
			out = append(out, c)
		}
	}
	return out
}

// domainChannels returns the domain's half of each row of rows.
func domainChannels(rows []route) []domain.ChannelSpec {
	out := make([]domain.ChannelSpec, len(rows))
	for n, c := range rows {
		out[n] = c.ChannelSpec
	}
	return out
}

// channelNames returns the name of each row of rows.
func channelNames(rows []route) []ports.Channel {
	out := make([]ports.Channel, len(rows))
	for n, c := range rows {
		out[n] = c.Name
	}
	return out
}
