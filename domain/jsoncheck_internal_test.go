package domain

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonCheckSeeds are inputs at the edges of the grammar, valid and not.
var jsonCheckSeeds = []string{
	``, ` `, `{}`, ` { } `, `[]`, `[ ]`, `""`, `"a"`, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-05`, `1e`, `1e+`,
	`-1.25e+10`, `true`, `false`, `null`, `nul`, `truex`, `tru`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`,
	`{"a":1 "b":2}`, `{"a":1}x`, `{"a":1}}`, `[[]]]`, `"\u00e9\ud800"`, `"\u12"`, `"\uZZZZ"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`,
	"\"tab\there\"", "\"\x1f\"", "\"\x7f\"", `"unterminated`, `"ends in backslash\`, "\t\n\r 1 \t\n\r", "\u00a01", "1\u00a0",
	`{"event_id":"e","recipient":{"name":"Ada"},"channels":["sms"],"data":{"n":-1.5e3,"b":true,"z":null}}`,
	strings.Repeat("[", 32) + strings.Repeat("]", 32), strings.Repeat("[", 33) + strings.Repeat("]", 33),
	strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32), strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33),
	strings.Repeat("[", 40) + "x", `"` + strings.Repeat("[", 40) + `"`, "[1,x" + strings.Repeat("[", 40),
}

// TestCheckJSON holds checkJSON to json.Valid and tooDeep, which decode
// used before it, on the seeds; FuzzCheckJSON on anything.
func TestCheckJSON(t *testing.T) {
	for _, s := range jsonCheckSeeds {
		agreeWithReference(t, []byte(s))
	}
}

func FuzzCheckJSON(f *testing.F) {
	for _, s := range jsonCheckSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { agreeWithReference(t, b) })
}

// agreeWithReference fails t unless checkJSON's answer on b is what
// decode needs: valid exactly when json.Valid says so and b nests no
// deeper than MaxJSONDepth; deep only when tooDeep says so; and when
// neither, tooDeep (which decode then asks) gives the rest.
func agreeWithReference(t *testing.T, b []byte) {
	t.Helper()
	valid, deep := checkJSON(b, MaxJSONDepth)
	refValid, refDeep := json.Valid(b), tooDeep(b, MaxJSONDepth)
	switch {
	case valid && deep:
		t.Fatalf("checkJSON(%q): valid and too deep at once", b)
	case valid != (refValid && !refDeep):
		t.Fatalf("checkJSON(%q): valid %v; json.Valid %v, tooDeep %v", b, valid, refValid, refDeep)
	case deep && !refDeep:
		t.Fatalf("checkJSON(%q): too deep, but tooDeep says not", b)
	}
}
