// Package httpapi serves the worker's operational endpoints, on net/http
// alone: /healthz (liveness), /readyz (readiness, with the state of each
// dependency in the body) and /metrics (whatever handler it is given). It
// knows nothing of Kafka, Redis or Prometheus: it is handed functions.
package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Config configures Handler.
type Config struct {
	// Ready reports whether the process is in service: for the worker, a
	// member of its consumer group (holding partitions or not) and not
	// wedged. Required.
	Ready func() bool
	// Status returns the state of each part, shown in /readyz's body
	// beside "ready" (e.g. "consumer": "assigned", "store": "open-circuit").
	// It is informative: only Ready decides the status code, so a
	// dependency the worker can run without does not take it out of
	// service. Nil: the body has "ready" only.
	Status func() map[string]string
	// Metrics serves /metrics. Nil: /metrics is not served (404).
	Metrics http.Handler
	// Live reports whether the process can still make progress. It must
	// say false only for what a restart fixes and waiting does not (for
	// the worker: every handler slot held by a handler that ignored its
	// cancellation), never for a dependency being down. Nil: always live.
	Live func() bool
}

// Handler returns the endpoints' handler. It panics if cfg.Ready is nil:
// a readiness probe that cannot say no is a wiring bug.
func Handler(cfg Config) http.Handler {
	if cfg.Ready == nil {
		panic("httpapi: Config.Ready is nil")
	}
	mux := http.NewServeMux()
	// "GET" patterns answer HEAD too.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The process answers HTTP and is not wedged: that is all liveness
		// asks. Anything more (a dependency down) would get a healthy pod
		// restarted.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if cfg.Live != nil && !cfg.Live() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "wedged")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{}
		if cfg.Status != nil {
			for k, v := range cfg.Status() {
				body[k] = v
			}
		}
		ready := cfg.Ready()
		body["ready"] = ready
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body) // a failed write is the prober's loss
	})
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	return mux
}

// Server is a running HTTP server. Its methods are safe for concurrent use.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{} // closed when Serve has returned

	shutdownOnce sync.Once
	shutdownErr  error
}

// Timeouts of the server: probes and scrapes are small and quick, and a
// client that dribbles must not hold a connection for ever.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
)

// Listen binds addr (host:port; port 0 picks a free one) and serves h in the
// background. It binds before returning so that a port in use fails the
// worker at start, not in a log line later. A failure of the server after
// that is logged to log as "http_server_failed" (nil log: slog.Default()).
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	log = cmp.Or(log, slog.Default())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("httpapi: listen on %s: %w", addr, err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http_server_failed", slog.String("addr", s.addr.String()), slog.String("error", err.Error()))
		}
	}()
	return s, nil
}

// Addr returns the address the server is bound to (with the port it picked,
// if it was given port 0).
func (s *Server) Addr() net.Addr { return s.addr }

// Shutdown stops accepting connections, lets requests in progress finish
// until ctx is done, then closes what is left. It returns once the server
// has stopped; the error is ctx's if requests had to be cut off. It is safe
// to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		s.shutdownErr = s.srv.Shutdown(ctx)
		if s.shutdownErr != nil {
			// Past the deadline: cut the remaining connections.
			_ = s.srv.Close()
		}
	})
	<-s.done
	return s.shutdownErr
}
