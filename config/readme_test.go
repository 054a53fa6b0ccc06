package config_test

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
)

var update = flag.Bool("update", false, "rewrite the configuration section of ../README.md from config.Reference")

const (
	readmePath  = "../README.md"
	beginMarker = "<!-- config:begin -->"
	endMarker   = "<!-- config:end -->"
	updateHint  = "go test ./config -update"
)

// renderReference renders Reference as the README's Markdown table.
func renderReference() string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("<!-- Generated from config.Reference (config/reference.go): edit it there, then run `" + updateHint + "`. -->\n\n")
	b.WriteString("| Variable | Default | Meaning |\n|---|---|---|\n")
	for _, v := range config.Reference {
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
// not what Reference renders, so the documentation cannot drift from the
// defaults Load uses. With -update it rewrites that section, and only it.
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
