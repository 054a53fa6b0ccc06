package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/docsection"
)

var update = flag.Bool("update", false, "rewrite the configuration section of README.md from config.Reference, which holds the providers' settings")

const (
	readmePath  = "../../README.md"
	beginMarker = "<!-- config:begin -->"
	endMarker   = "<!-- config:end -->"
	updateHint  = "go test ./cmd/notification-worker -run TestREADMEConfigReference -update"
)

// renderReference renders the variables the worker reads as the README's
// Markdown table: config.Reference, the worker's own variables and every
// provider's settings (config.Providers), so a provider's settings are
// listed without a second registration.
func renderReference() string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("<!-- Generated from config.Reference (config/reference.go), which takes each adapter's settings from its Provider (adapters/*/settings.go): edit them there, then run `" + updateHint + "`. -->\n\n")
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
// not what renderReference renders, so the documentation cannot drift from
// the defaults the worker uses, nor miss a provider's settings. With
// -update it rewrites that section, and only it.
func TestREADMEConfigReference(t *testing.T) {
	docsection.Section{
		Path: readmePath, Begin: beginMarker, End: endMarker,
		What: "the configuration table", From: "config.Reference and the providers' settings", Hint: updateHint,
	}.Check(t, renderReference(), *update)
}

// renderExitCodes renders exitCodes as the README's list, inside the
// bullet that holds it.
func renderExitCodes() string {
	var b strings.Builder
	for _, c := range exitCodes {
		fmt.Fprintf(&b, "  - `%d`: %s\n", c.code, c.meaning)
	}
	return b.String() + "  "
}

// TestREADMEExitCodes fails when the README's exit codes are not the ones
// run returns (exitCodes), so a code cannot change or appear without the
// README saying so. With -update it rewrites that list, and only it.
func TestREADMEExitCodes(t *testing.T) {
	docsection.Section{
		Path: readmePath, Begin: "<!-- exit-codes:begin -->", End: "<!-- exit-codes:end -->",
		What: "the exit codes", From: "exitCodes", Hint: "go test ./cmd/notification-worker -run TestREADMEExitCodes -update",
	}.Check(t, renderExitCodes(), *update)
}
