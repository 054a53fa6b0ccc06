package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
)

var update = flag.Bool("update", false, "rewrite the configuration section of README.md from config.Reference and the channel table's providers")

const (
	readmePath  = "../../README.md"
	beginMarker = "<!-- config:begin -->"
	endMarker   = "<!-- config:end -->"
	updateHint  = "go test ./cmd/notification-worker -run TestREADMEConfigReference -update"
)

// renderReference renders the variables the worker reads as the README's
// Markdown table: config.Reference, and the variables of every provider
// the channel table and the stores declare (providers), so a provider's
// settings are listed without a second registration.
func renderReference() string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("<!-- Generated from config.Reference (config/reference.go) and the providers' Settings (cmd/notification-worker/channels.go): edit them there, then run `" + updateHint + "`. -->\n\n")
	b.WriteString("| Variable | Default | Meaning |\n|---|---|---|\n")
	for _, v := range config.ReferenceWith(providers()...) {
		def := ""
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		meaning := v.Meaning
		if v.Secret {
			meaning += " Secret: shown as `***` in logs and errors."
		}
		b.WriteString("| `" + v.Name + "` | " + cell(def) + " | " + cell(meaning) + " |\n")
	}
	return b.String()
}

// TestREADMEConfigReference fails when the README's configuration table is
// not what renderReference renders, so the documentation cannot drift from
// the defaults the worker uses, nor miss a provider's settings. With
// -update it rewrites that section, and only it.
func TestREADMEConfigReference(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(readme, []byte(beginMarker))
	end := bytes.Index(readme, []byte(endMarker))
	if begin < 0 || end < begin {
		t.Fatalf("%s: want the markers %s and %s, in that order", readmePath, beginMarker, endMarker)
	}
	start := begin + len(beginMarker)
	got := string(readme[start:end])
	want := "\n" + renderReference()

	if *update {
		if got == want {
			return
		}
		out := append(append(append([]byte{}, readme[:start]...), want...), readme[end:]...)
		if err := os.WriteFile(readmePath, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the configuration section of %s", readmePath)
		return
	}
	if got != want {
		t.Errorf("%s: the configuration table differs from config.Reference; run\n\t%s\n--- README ---\n%s\n--- Reference ---\n%s", readmePath, updateHint, got, want)
	}
}
