// Package docsection keeps a generated section of a document (the text
// between two marker comments) equal to what the code renders, for the
// tests that own such a section: the README's configuration table, the
// runbook's metric list.
package docsection

import (
	"bytes"
	"os"
	"testing"
)

// Section is one generated section of a document.
type Section struct {
	// Path is the document, relative to the test's package.
	Path string
	// Begin and End are the markers around the section, each on a line
	// of its own; Begin must come first.
	Begin, End string
	// What names the section, From what it is rendered from, for the
	// failure message ("the metric list", "what the registry exports").
	What, From string
	// Hint is the command that rewrites the section.
	Hint string
}

// Check fails t when the section is not "\n" + want. With update set it
// rewrites the section instead, and nothing else of the document.
func (s Section) Check(t testing.TB, want string, update bool) {
	t.Helper()
	doc, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(doc, []byte(s.Begin))
	end := bytes.Index(doc, []byte(s.End))
	if begin < 0 || end < begin {
		t.Fatalf("%s: want the markers %s and %s, in that order", s.Path, s.Begin, s.End)
	}
	start := begin + len(s.Begin)
	got := string(doc[start:end])
	want = "\n" + want
	if got == want {
		return
	}
	if update {
		out := append(append(append([]byte{}, doc[:start]...), want...), doc[end:]...)
		if err := os.WriteFile(s.Path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s of %s", s.What, s.Path)
		return
	}
	t.Errorf("%s: %s differs from %s; run\n\t%s\n--- %s ---\n%s\n--- rendered ---\n%s", s.Path, s.What, s.From, s.Hint, s.Path, got, want)
}
