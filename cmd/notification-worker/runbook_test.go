package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunbookListsEveryLogEvent fails when the worker's command writes a
// log event (a msg of its own: the start-up lines, the start failures, the
// shutdown's) that the runbook's log events section does not name, so an
// operator who meets one finds what it means and what to do.
func TestRunbookListsEveryLogEvent(t *testing.T) {
	doc, err := os.ReadFile("../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(doc)[strings.Index(string(doc), "\n## Log events\n")+1:], "\n## ")
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	event := regexp.MustCompile(`\.(?:Debug|Info|Warn|Error)\("([a-z_]+)"`)
	found := 0
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range event.FindAllStringSubmatch(string(src), -1) {
			found++
			if !strings.Contains(section, "`"+m[1]+"`") {
				t.Errorf("%s logs %s, which the runbook's log events do not name", f, m[1])
			}
		}
	}
	if found == 0 {
		t.Fatal("found no log event in the command's sources")
	}
}
