package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/internal/logtest"
)

// The debug server is opt-in and apart: off unless DEBUG_ADDR is set, on
// loopback when DEBUG_ADDR has no host, and never on HTTP_ADDR, which the
// monitoring namespace reaches.
func TestMain_DebugServer(t *testing.T) {
	open := func(t *testing.T, env map[string]string) *Main {
		t.Helper()
		env["EVENT_SOURCE"], env["HTTP_ADDR"] = "embedded", "127.0.0.1:0"
		var out logtest.Buffer
		m := &Main{Config: MustLoadConfig(t, env), Stdout: &out}
		MustOpen(t, m)
		return m
	}
	mustGet := func(t *testing.T, url string, want int) string {
		t.Helper()
		code, body, err := httpGet(url)
		if err != nil || code != want {
			t.Fatalf("GET %s: %d, %v; want %d", url, code, err, want)
		}
		return body
	}

	t.Run("OffByDefault", func(t *testing.T) {
		m := open(t, map[string]string{})
		if a := m.DebugAddr(); a != "" {
			t.Errorf("debug server on %s without DEBUG_ADDR", a)
		}
		mustGet(t, "http://"+m.HTTPAddr()+"/debug/pprof/", http.StatusNotFound)
	})

	t.Run("ServesPprofOnLoopback", func(t *testing.T) {
		m := open(t, map[string]string{"DEBUG_ADDR": ":0"})
		addr := m.DebugAddr()
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("DEBUG_ADDR=:0 bound %q, want loopback", addr)
		}
		if body := mustGet(t, "http://"+addr+"/debug/pprof/", http.StatusOK); !strings.Contains(body, "goroutine") {
			t.Errorf("/debug/pprof/ lists no goroutine profile:\n%.300s", body)
		}
		if body := mustGet(t, "http://"+addr+"/debug/pprof/goroutine?debug=1", http.StatusOK); !strings.Contains(body, "goroutine profile:") {
			t.Errorf("no goroutine dump:\n%.300s", body)
		}
		mustGet(t, "http://"+m.HTTPAddr()+"/debug/pprof/", http.StatusNotFound)
	})
}
