// Package promtest reads the Prometheus text exposition format back into
// numbers, so tests can assert on what a scrape of /metrics actually shows
// rather than on the collectors behind it.
package promtest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Samples maps a series, written as the exposition format writes it
// (`name{label="value",...}`, labels in name order), to its value.
type Samples map[string]float64

// Get returns the value of the series and whether it was exported.
func (s Samples) Get(series string) (float64, bool) {
	v, ok := s[series]
	return v, ok
}

// Want fails tb, without stopping it, unless series is exported with
// value want.
func (s Samples) Want(tb testing.TB, series string, want float64) {
	tb.Helper()
	got, ok := s.Get(series)
	switch {
	case !ok:
		tb.Errorf("%s not exported", series)
	case got != want:
		tb.Errorf("%s = %v, want %v", series, got, want)
	}
}

// WithPrefix returns the series whose name starts with prefix: every
// series of a metric, or of one histogram's _count.
func (s Samples) WithPrefix(prefix string) Samples {
	out := Samples{}
	for k, v := range s {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// Parse reads the text format. It does not validate it: comment lines are
// skipped, and every other line must be "series value [timestamp]".
func Parse(r io.Reader) (Samples, error) {
	out := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// A label value may hold spaces; the value follows the closing brace.
		rest := line
		series := ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], strings.TrimSpace(line[i+1:])
		} else {
			f := strings.Fields(line)
			series, rest = f[0], strings.Join(f[1:], " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("line %d: no value: %q", n, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out[series] = v
	}
	return out, sc.Err()
}

// MustScrape GETs url, expecting 200, and parses the body.
func MustScrape(tb testing.TB, url string) Samples {
	tb.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatalf("promtest: scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		tb.Fatalf("promtest: scrape %s: status %d: %s", url, resp.StatusCode, b)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		tb.Fatalf("promtest: scrape %s: %v", url, err)
	}
	return s
}
