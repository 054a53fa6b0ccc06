package main

import (
	"log/slog"
	"time"

	"github.com/harborlight/notification-worker/adapters/ratelimit"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// openRateLimits returns the pace of each channel offered with a rate
// limit (SMS_RATE_LIMIT, EMAIL_RATE_LIMIT), and the limiter that keeps
// them: on the redis store, one in the same Redis that every replica
// shares, behind a Fallback that paces by this replica's share
// (KAFKA_EXPECTED_REPLICAS) while Redis cannot answer; otherwise one in
// this process. No limit set: no paces and a nil limiter.
func (m *Main) openRateLimits(store string) (ports.RateLimiter, map[ports.Channel]domain.Pace, error) {
	cfg := m.Config
	paces := map[ports.Channel]domain.Pace{}
	for _, ch := range m.channels {
		var p domain.Pace
		switch ch.Name {
		case ports.ChannelSMS:
			t := twilio.LoadSettings(cfg.Settings())
			p = domain.Pace{Sender: smsSender(t.From, t.MessagingServiceSID), Limit: cfg.RateLimit.SMS}
		case ports.ChannelEmail:
			p = domain.Pace{Sender: "smtp:" + smtp.LoadSettings(cfg.Settings()).Host, Limit: cfg.RateLimit.Email}
		}
		if p.Limit.Rate > 0 {
			paces[ch.Name] = p
		}
	}
	if len(paces) == 0 {
		return nil, nil, nil
	}
	if store != "redis" || m.Deps.Store != nil {
		return ratelimit.NewLocal(nil), paces, nil
	}
	rcfg := storeConfig(cfg)
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		return nil, nil, err
	}
	// MAX_IN_FLIGHT handlers each make one call at a time; while Redis is
	// silent the Fallback asks it at most once per cool-off, and each call
	// may keep its slot unanswered for unansweredFor.
	rcfg.MaxUnanswered = cfg.MaxInFlight * (int(unansweredFor/ratelimit.DefaultCoolOff) + 2)
	prefix := redis.DefaultRateKeyPrefix
	if rcfg.KeyPrefix != "" {
		// The operator keeps this deployment's keys apart by the prefix:
		// its senders' paces too.
		prefix = rcfg.KeyPrefix + "rate:"
	}
	fleet, err := redis.NewRateLimiter(redis.RateLimiterConfig{Conn: rcfg, KeyPrefix: prefix})
	if err != nil {
		return nil, nil, err
	}
	m.closers = append(m.closers, fleet.Close)
	fellBack := &ports.LogLimit{Every: rateFallbackLogEvery}
	fb, err := ratelimit.NewFallback(ratelimit.FallbackConfig{
		Fleet:    fleet,
		Replicas: cfg.ExpectedReplicas,
		OnFallback: func(op, sender string, err error) {
			m.metrics.RateLimitFallback()
			if held, ok := fellBack.Allow(time.Now()); ok {
				m.logger.Warn("rate_limit_fallback", slog.String("operation", op), slog.String("sender", sender),
					slog.Int("replicas", cfg.ExpectedReplicas), slog.String("error", err.Error()),
					slog.Int("suppressed_since_last", held))
			}
		},
		OnRecover: func() { m.logger.Info("rate_limit_recovered") },
	})
	if err != nil {
		return nil, nil, err
	}
	return fb, paces, nil
}

// rateFallbackLogEvery is the least time between two rate_limit_fallback
// lines.
const rateFallbackLogEvery = 10 * time.Second

// smsSender is the sender Twilio paces: the Messaging Service when one is
// set (Twilio then picks the number from its pool), else the From number.
func smsSender(from, service string) string {
	if service != "" {
		return "twilio:" + service
	}
	return "twilio:" + from
}
