package main

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// openDebug starts the debug server DEBUG_ADDR asks for: net/http/pprof on
// a mux and a listener of its own, so nothing of it is reachable through
// HTTP_ADDR, which the monitoring namespace scrapes. Off when DebugAddr is
// empty. Close stops it at once, cutting a profile in progress: profiles
// are taken while the worker runs, not while it stops.
func (m *Main) openDebug() error {
	addr := m.Config.DebugAddr
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	// Index serves the named profiles too (goroutine, heap, allocs, block,
	// mutex, threadcreate) under /debug/pprof/<name>.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return m.configError("DEBUG_ADDR", addr, err.Error())
	}
	// No WriteTimeout: a CPU profile or a trace answers after the seconds
	// it was asked for.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.logger.Error("debug_server_failed", slog.String("error", err.Error()))
		}
	}()
	m.debug = ln.Addr().String()
	m.closers = append(m.closers, func() { _ = srv.Close() })
	m.adapters["debug"] = "http://" + m.debug + "/debug/pprof/ (DEBUG_ADDR)"
	return nil
}

// DebugAddr returns the address the debug server is bound to, or "" when
// DEBUG_ADDR is empty or Open has not started it.
func (m *Main) DebugAddr() string { return m.debug }
