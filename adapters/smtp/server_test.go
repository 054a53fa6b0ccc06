package smtp_test

import (
	"bytes"
	"io"
	"testing"
)

// bodyOf reads the whole of r; for tests of parsed parts.
func bodyOf(tb testing.TB, r io.Reader) string {
	tb.Helper()
	var b bytes.Buffer
	if _, err := io.Copy(&b, r); err != nil {
		tb.Fatal(err)
	}
	return b.String()
}
