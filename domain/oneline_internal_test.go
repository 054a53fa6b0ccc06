package domain

import (
	"strings"
	"testing"
	"unicode"
)

// foldLines is OneLine without its shortcut: every run of white space and
// control characters folded into one space, none at either end.
func foldLines(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
}

var oneLineSeeds = []string{"", "Ada", "Ada Lovelace", " Ada", "Ada ", "Ada  Lovelace", "Ada\tL", "Ada\nL", "A\x7fda", "Zoë", "Ada\u00a0L",
	"Ada\u2028L", "\x00", "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./", "a b c d e", "  ", " "}

// TestOneLine_Shortcut holds OneLine's shortcut for a name already on one
// line to what folding gives; FuzzOneLine on anything.
func TestOneLine_Shortcut(t *testing.T) {
	for _, s := range oneLineSeeds {
		if got, want := OneLine(s), foldLines(s); got != want {
			t.Errorf("OneLine(%q) = %q, want %q", s, got, want)
		}
	}
}

func FuzzOneLine(f *testing.F) {
	for _, s := range oneLineSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := OneLine(s), foldLines(s); got != want {
			t.Fatalf("OneLine(%q) = %q, want %q", s, got, want)
		}
	})
}
