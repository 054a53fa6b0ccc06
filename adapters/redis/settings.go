package redis

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/ports"
)

// Provider is the Redis store as the worker offers it
// (IDEMPOTENCY_STORE=redis), configured by REDIS_URL, and shared by the
// worker's replicas. The store's generic settings (IDEMPOTENCY_TTL,
// IDEMPOTENCY_TIMEOUT, the breaker's, the failure mode) are the worker's,
// not these. The worker builds the store itself, from LoadSettings: it
// sizes the store's ring by its breaker, probes the store from the breaker
// and watches its health.
var Provider = ports.Provider{
	Name:     "redis",
	Variable: ports.StoreVariable,
	Settings: []ports.Setting{
		{Name: "REDIS_URL", Meaning: "`redis://` or `rediss://` URL of the idempotency store, password included if any. Required with `IDEMPOTENCY_STORE=redis`, and with Twilio or SMTP configured unless `IDEMPOTENCY_STORE=memory` (see `IDEMPOTENCY_STORE`). Behind Redis Sentinel, name the Sentinels here, as rueidis reads them: `redis://user:password@sentinel-1:26379/0?addr=sentinel-2:26379&addr=sentinel-3:26379&master_set=mymaster`: the host and each `addr` are Sentinels (more hosts in the host part, comma-separated, are refused), `master_set` is the name they watch (`sentinel monitor <name> ...`); user, password and database apply to the primary they name, `rediss` to the Sentinels and the primary, with the first host as the TLS server name.", Secret: true, MaskURL: true},
		{Name: "REDIS_SENTINEL_ADDRS", Meaning: "The other way to name Sentinels (prefer `master_set` in `REDIS_URL`): a comma-separated `host:port` list, set with `REDIS_SENTINEL_MASTER` or neither, and not with `master_set`. `REDIS_URL` stays required: its scheme (`rediss` is TLS, to the Sentinels too), user, password and database apply, its host is not dialled but is the TLS server name. Refused with Cluster seeds (`?addr=`) in `REDIS_URL`."},
		{Name: "REDIS_SENTINEL_MASTER", Meaning: "Name of the master set the Sentinels in `REDIS_SENTINEL_ADDRS` watch (`sentinel monitor <name> ...`)."},
		{Name: "REDIS_SENTINEL_USERNAME", Meaning: "User the Sentinels themselves require (their own ACL), if any, whichever way they are named."},
		{Name: "REDIS_SENTINEL_PASSWORD", Meaning: "Password the Sentinels themselves require (`requirepass` in sentinel.conf), if any.", Secret: true},
		{Name: "IDEMPOTENCY_MIN_REPLICAS", Meaning: "Replicas that must acknowledge every claim and sent record (Redis `WAIT`, within `IDEMPOTENCY_TIMEOUT`) before the worker relies on it (0 to 100). Unset: 1 when, at start, the primary (on Redis Cluster, every primary) has a connected replica (`INFO replication`), else 0; the worker logs which, and why, as `idempotency_replicas`. 0: the primary's word is enough, and a failover that promotes a lagging replica loses the last records, whose replays are sent again. Short of the count the call fails and the failure mode applies; see docs/runbook.md for what it costs and when to change it."},
		{Name: "IDEMPOTENCY_WAIT_AOF", Default: "false", Meaning: "Acknowledge with `WAITAOF 0 <IDEMPOTENCY_MIN_REPLICAS>` as well, after the `WAIT`: each replica has also fsynced the write to its AOF (`appendonly yes`; a replica without one never counts). Needs `IDEMPOTENCY_MIN_REPLICAS` above 0 and Redis 7.2 or later on every node: the worker refuses to start otherwise. A replica with `appendfsync always` acknowledges within milliseconds; with `everysec`, within 1 to 3 s, so `IDEMPOTENCY_TIMEOUT` must be above that."},
		{Name: "IDEMPOTENCY_KEY_FORMAT", Default: Compact.String(), Meaning: "How Redis keys and sent records are laid out. `compact`: `<IDEMPOTENCY_COMPACT_KEY_PREFIX><channel letter><12 characters of a hash of the event_id>`, holding one integer (send time and fingerprint, no provider id), about 117 bytes of Redis memory a notification; `notification-worker key <event_id>` prints an event's keys. `readable`: `<IDEMPOTENCY_KEY_PREFIX><channel>:<event_id>`, holding the provider id too, about 269 bytes; what releases before `compact` wrote. See docs/capacity.md."},
		{Name: "IDEMPOTENCY_COMPACT_KEY_PREFIX", Default: DefaultCompactPrefix, Meaning: "Prefix of every `compact` key, to keep ours apart from others' on a shared Redis. Each character beyond the first costs 16 bytes a key on Redis 7 (keys of up to 14 bytes fit its smallest allocation)."},
		{Name: "IDEMPOTENCY_KEY_PREFIX", Default: DefaultKeyPrefix, Meaning: "Prefix of every `readable` key, to keep ours apart from others' on a shared Redis."},
		{Name: "IDEMPOTENCY_READ_BOTH_FORMATS", Default: "true", Meaning: "Also read the key of the format not written, in the same round trip as the claim, so that records and claims written in the other format are honoured: needed through a rolling upgrade from a release before `compact`, and for `IDEMPOTENCY_TTL` after any change of `IDEMPOTENCY_KEY_FORMAT` or of either prefix. `false` saves one Redis `GET` per notification once nothing of the other format is alive."},
		{Name: "IDEMPOTENCY_ALLOW_EVICTION", Default: "false", Meaning: "Start on a Redis whose `maxmemory` is set and whose `maxmemory-policy` can evict the worker's keys (`allkeys-*`, or `volatile-*`: every key has a TTL). By default the worker refuses to start there (exit 2): an evicted sent record lets a replay send its notification again. `true` accepts that risk, logs `idempotency_eviction_allowed` at start, and evictions are logged `idempotency_keys_evicted` and counted. Prefer `noeviction` with `maxmemory` sized from docs/capacity.md."},
	},
	Shared: true,
	Load: func(s ports.Settings) bool {
		LoadSettings(s)
		return s.Set("REDIS_URL")
	},
}

// LoadSettings reads the Provider's settings through s into a Config, the
// one place their rules are written: each variable is checked, and a bad
// one reported with s.Fail (and left zero); so is a combination that cannot
// take effect (WAITAOF without replicas, half a Sentinel setting, Sentinels
// named two ways, Sentinel beside Cluster seeds). URL is empty when
// REDIS_URL is unset. It sets neither Timeout, KeepAbandoned, MaxUnanswered
// nor the Health watch's logger and interval, which are the worker's.
func LoadSettings(s ports.Settings) Config {
	cfg := Config{
		URL:           redisURL(s, "REDIS_URL"),
		CompactPrefix: s.String("IDEMPOTENCY_COMPACT_KEY_PREFIX"),
		KeyPrefix:     s.String("IDEMPOTENCY_KEY_PREFIX"),
		ReadBoth:      s.Bool("IDEMPOTENCY_READ_BOTH_FORMATS"),
		MinReplicas:   minReplicas(s),
		WaitAOF:       s.Bool("IDEMPOTENCY_WAIT_AOF"),
		Health:        HealthConfig{AllowEviction: s.Bool("IDEMPOTENCY_ALLOW_EVICTION")},
	}
	format, err := ParseFormat(s.String("IDEMPOTENCY_KEY_FORMAT"))
	if err != nil {
		s.Fail("IDEMPOTENCY_KEY_FORMAT", "want one of "+Compact.String()+", "+Readable.String())
	}
	cfg.Format = format
	if cfg.WaitAOF && cfg.MinReplicas <= 0 {
		s.Fail("IDEMPOTENCY_WAIT_AOF", "needs IDEMPOTENCY_MIN_REPLICAS above 0: WAITAOF waits for that many replicas' fsync")
	}
	sentinel(s, &cfg)
	return cfg
}

// sentinel reads the REDIS_SENTINEL_* variables: the Sentinels and their
// master set come together, with REDIS_URL, and without Cluster seeds or
// Sentinels named in REDIS_URL (master_set).
func sentinel(s ports.Settings, cfg *Config) {
	cfg.SentinelAddrs = s.HostPorts("REDIS_SENTINEL_ADDRS")
	cfg.SentinelMaster = s.String("REDIS_SENTINEL_MASTER")
	cfg.SentinelUsername = s.String("REDIS_SENTINEL_USERNAME")
	cfg.SentinelPassword = s.String("REDIS_SENTINEL_PASSWORD")
	addrs, master := s.Set("REDIS_SENTINEL_ADDRS"), s.Set("REDIS_SENTINEL_MASTER")
	opt, _ := rueidis.ParseURL(cfg.URL)
	inURL := cfg.URL != "" && opt.Sentinel.MasterSet != ""
	switch {
	case inURL && (addrs || master):
		for _, n := range []string{"REDIS_SENTINEL_ADDRS", "REDIS_SENTINEL_MASTER"} {
			if s.Set(n) {
				s.Fail(n, "cannot be used with master_set in REDIS_URL, which names the Sentinels already: name them one way")
			}
		}
		return
	case inURL:
		return
	case addrs && !master:
		s.Fail("REDIS_SENTINEL_MASTER", "required with REDIS_SENTINEL_ADDRS: set both REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER, or neither")
	case master && !addrs:
		s.Fail("REDIS_SENTINEL_ADDRS", "required with REDIS_SENTINEL_MASTER: set both REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER, or neither")
	case !addrs && !master:
		for _, n := range []string{"REDIS_SENTINEL_USERNAME", "REDIS_SENTINEL_PASSWORD"} {
			if s.Set(n) {
				s.Fail(n, "set, but REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER are not: it authenticates to the Sentinels")
			}
		}
		return
	}
	if !s.Set("REDIS_URL") {
		s.Fail("REDIS_URL", "required with REDIS_SENTINEL_ADDRS: its scheme (rediss for TLS), user, password and database apply to the primary the Sentinels name; its host is not dialled")
	} else if u, err := url.Parse(s.String("REDIS_URL")); err == nil && u.Query().Has("addr") {
		s.Fail("REDIS_SENTINEL_ADDRS", "cannot be used with Redis Cluster seeds (?addr=) in REDIS_URL: Sentinel names one primary; use one or the other")
	}
}

// redisURL checks the scheme, host and database of a Redis URL. Its reasons
// never quote the URL or url.Parse's error, which does: the URL may hold
// the password.
func redisURL(s ports.Settings, name string) string {
	v := s.String(name)
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		s.Fail(name, "not a valid URL (check that special characters in the password are percent-encoded)")
		return ""
	case u.Scheme != "redis" && u.Scheme != "rediss":
		s.Fail(name, "want a redis:// or rediss:// (TLS) URL")
		return ""
	case u.Host == "":
		s.Fail(name, "want a host: redis://[user:password@]host:port[/db]")
		return ""
	case strings.Contains(u.Host, ","):
		s.Fail(name, "want one host: give more Sentinels (with master_set) or Cluster seeds as &addr=host:port")
		return ""
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			s.Fail(name, "want a database number as the path, such as /0")
			return ""
		}
	}
	return v
}
