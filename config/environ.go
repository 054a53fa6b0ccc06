package config

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"

	"github.com/harborlight/notification-worker/ports"
)

// LoadWorkerEnviron is LoadWorker on environ, the process's environment as
// os.Environ returns it ("NAME=value"), whose names it checks in the same
// pass as the values:
//
//   - A name that is no setting but within two edits of one (letter case
//     aside) is refused, naming the setting: misspelt, the setting would
//     keep its default without a word (IDEMPOTENCY_FAILUR_MODE=closed would
//     run fail-open).
//   - A Kubernetes service link (see serviceLink) is left alone: Kubernetes
//     sets them in a pod for every Service of its namespace.
//   - Any other name that starts as a setting does (its first word and
//     underscore: KAFKA_, REDIS_, ...) is ignored and kept in
//     Config.UnknownVariables, for the worker to log, unless a library the
//     worker is built on reads it (readElsewhere).
func LoadWorkerEnviron(environ []string, providers ...ports.Provider) (Config, error) {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = value
	}
	return loadWorker(func(name string) (string, bool) { v, ok := env[name]; return v, ok }, env, providers)
}

// maxTypoEdits is how many single-letter edits apart from a setting a name
// that is no setting is taken for a misspelling of it.
const maxTypoEdits = 2

// names checks the names of env as LoadWorkerEnviron says: it reports each
// misspelt setting, and returns, sorted, the names that start as a setting
// does but name none.
func (l *loader) names(env map[string]string) []string {
	known := map[string]bool{}
	prefixes := map[string]bool{}
	for _, v := range slices.Concat(Reference, slices.Collect(maps.Values(l.declared))) {
		known[v.Name] = true
		if word, _, ok := strings.Cut(v.Name, "_"); ok {
			prefixes[word+"_"] = true
		}
	}
	var unknown []string
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if known[name] || serviceLink(name, env[name]) {
			continue
		}
		if near := nearest(name, known); near != "" {
			// No value: a misspelt secret's would be shown.
			l.problems = append(l.problems, Problem{Var: name,
				Reason: "not a setting, and close to " + near + ": rename it to " + near + ", or unset it"})
			continue
		}
		if word, _, ok := strings.Cut(name, "_"); ok && prefixes[word+"_"] && !readElsewhere(name) {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// nearest returns the name in known fewest edits from name (Levenshtein
// distance), at most maxTypoEdits, letter case aside; "" when there is
// none.
func nearest(name string, known map[string]bool) string {
	best, bestEdits := "", maxTypoEdits+1
	for _, k := range slices.Sorted(maps.Keys(known)) {
		if d := levenshtein.ComputeDistance(strings.ToUpper(name), k); d < bestEdits {
			best, bestEdits = k, d
		}
	}
	return best
}

var (
	serviceLinkName  = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$`)
	serviceLinkValue = regexp.MustCompile(`^(tcp|udp|sctp)://[0-9A-Fa-f.:\[\]]+:[0-9]+$`)
)

// serviceLink reports whether name=value is one of the variables
// Kubernetes sets in a pod for each Service of its namespace (unless the
// pod sets enableServiceLinks: false). For a Service named smtp:
// SMTP_SERVICE_HOST, SMTP_SERVICE_PORT, SMTP_SERVICE_PORT_<port name>,
// SMTP_PORT=tcp://10.0.0.9:587, and for each port SMTP_PORT_587_TCP (or
// _UDP, _SCTP) with its _PROTO, _PORT and _ADDR. SMTP_PORT is told by its
// value, since it is also a setting.
func serviceLink(name, value string) bool {
	return serviceLinkName.MatchString(name) || strings.HasSuffix(name, "_PORT") && serviceLinkValue.MatchString(value)
}

// readElsewhere reports whether name, which starts as a setting does, is
// read by a library the worker is built on: Go's HTTP clients read
// HTTP_PROXY, and OpenTelemetry's SDK the OTEL_ variables it defines (the
// exporter's timeout and certificates, the sampler, resource attributes).
func readElsewhere(name string) bool {
	return name == "HTTP_PROXY" || strings.HasPrefix(name, "OTEL_")
}
