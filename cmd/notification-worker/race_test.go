//go:build race

package main

// raceEnabled is true when the tests run under the race detector, which
// slows every goroutine several times over.
const raceEnabled = true
