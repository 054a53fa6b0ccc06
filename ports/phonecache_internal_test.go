package ports

import (
	"fmt"
	"testing"
)

// A remembered answer is the answer checkPhone computes, for valid and
// invalid numbers alike, asked once, again, and after the cache started
// over full.
func TestPhoneCacheAnswersAsComputed(t *testing.T) {
	c := &phoneCache{max: 3}
	inputs := []string{"+31201234567", "+999123456", "+4420794601", "+12025550123", "+31201234567", "+442079460123", "+999123456"}
	for round := range 3 {
		for _, s := range inputs {
			wantOut, wantErr := checkPhone(s)
			out, err := c.get(s)
			if out != wantOut || fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("round %d, %s: got (%q, %v), want (%q, %v)", round, s, out, err, wantOut, wantErr)
			}
			if len(c.m) > c.max {
				t.Fatalf("cache holds %d answers, more than its bound %d", len(c.m), c.max)
			}
		}
	}
}
