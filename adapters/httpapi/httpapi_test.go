package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/httpapi"
)

func get(tb testing.TB, h http.Handler, method, path string) *httptest.ResponseRecorder {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestHandler(t *testing.T) {
	var ready atomic.Bool
	status := map[string]string{"consumer": "joining", "store": "ok"}
	h := httpapi.Handler(httpapi.Config{
		Ready:  ready.Load,
		Status: func() map[string]string { return status },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "some_metric 1\n")
		}),
	})

	t.Run("Healthz", func(t *testing.T) {
		// Liveness holds whatever readiness says.
		for _, r := range []bool{false, true} {
			ready.Store(r)
			if rec := get(t, h, http.MethodGet, "/healthz"); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != "ok" {
				t.Errorf("ready=%v: /healthz = %d %q, want 200 ok", r, rec.Code, rec.Body)
			}
		}
	})
	t.Run("ReadyzNotReady", func(t *testing.T) {
		ready.Store(false)
		rec := get(t, h, http.MethodGet, "/readyz")
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("/readyz = %d, want 503", rec.Code)
		}
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("/readyz body %q: %v", rec.Body, err)
		}
		if body["ready"] != false || body["consumer"] != "joining" || body["store"] != "ok" {
			t.Errorf("/readyz body = %v", body)
		}
	})
	t.Run("ReadyzReadyWithAFailingDependency", func(t *testing.T) {
		ready.Store(true)
		status = map[string]string{"consumer": "assigned", "store": "open-circuit"}
		rec := get(t, h, http.MethodGet, "/readyz")
		if rec.Code != http.StatusOK {
			t.Errorf("/readyz = %d, want 200: the status body does not decide readiness", rec.Code)
		}
		if got, want := strings.TrimSpace(rec.Body.String()), `{"consumer":"assigned","ready":true,"store":"open-circuit"}`; got != want {
			t.Errorf("/readyz body = %s, want %s", got, want)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
	})
	t.Run("StatusCannotOverrideReady", func(t *testing.T) {
		ready.Store(false)
		status = map[string]string{"ready": "yes"}
		var body map[string]any
		if err := json.Unmarshal(get(t, h, http.MethodGet, "/readyz").Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if body["ready"] != false {
			t.Errorf("ready = %v, want false", body["ready"])
		}
	})
	t.Run("Metrics", func(t *testing.T) {
		if rec := get(t, h, http.MethodGet, "/metrics"); rec.Code != http.StatusOK || rec.Body.String() != "some_metric 1\n" {
			t.Errorf("/metrics = %d %q", rec.Code, rec.Body)
		}
	})
	t.Run("HealthzWedged", func(t *testing.T) {
		// Live says no: the pod must be restarted, whatever readiness says.
		var live atomic.Bool
		h := httpapi.Handler(httpapi.Config{Ready: func() bool { return true }, Live: live.Load})
		if rec := get(t, h, http.MethodGet, "/healthz"); rec.Code != http.StatusServiceUnavailable || strings.TrimSpace(rec.Body.String()) != "wedged" {
			t.Errorf("not live: /healthz = %d %q, want 503 wedged", rec.Code, rec.Body)
		}
		live.Store(true)
		if rec := get(t, h, http.MethodGet, "/healthz"); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != "ok" {
			t.Errorf("live: /healthz = %d %q, want 200 ok", rec.Code, rec.Body)
		}
	})
	t.Run("HeadAnswered", func(t *testing.T) {
		if rec := get(t, h, http.MethodHead, "/healthz"); rec.Code != http.StatusOK {
			t.Errorf("HEAD /healthz = %d, want 200", rec.Code)
		}
	})
	t.Run("PostRefused", func(t *testing.T) {
		if rec := get(t, h, http.MethodPost, "/readyz"); rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST /readyz = %d, want 405", rec.Code)
		}
	})
	t.Run("UnknownPath", func(t *testing.T) {
		if rec := get(t, h, http.MethodGet, "/debug/pprof/"); rec.Code != http.StatusNotFound {
			t.Errorf("GET /debug/pprof/ = %d, want 404", rec.Code)
		}
	})
	t.Run("NoMetricsHandler", func(t *testing.T) {
		h := httpapi.Handler(httpapi.Config{Ready: func() bool { return true }})
		if rec := get(t, h, http.MethodGet, "/metrics"); rec.Code != http.StatusNotFound {
			t.Errorf("/metrics = %d, want 404", rec.Code)
		}
		if rec := get(t, h, http.MethodGet, "/readyz"); strings.TrimSpace(rec.Body.String()) != `{"ready":true}` {
			t.Errorf("/readyz body = %s", rec.Body)
		}
	})
}

func TestListen(t *testing.T) {
	h := httpapi.Handler(httpapi.Config{Ready: func() bool { return true }})

	t.Run("ServesUntilShutdown", func(t *testing.T) {
		s, err := httpapi.Listen("127.0.0.1:0", h, nil)
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + s.Addr().String() + "/healthz"
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz = %d", resp.StatusCode)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
		c := &http.Client{Timeout: 2 * time.Second}
		if _, err := c.Get(url); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("GET after Shutdown: %v, want connection refused", err)
		}
	})
	t.Run("PortInUseFailsAtListen", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if s, err := httpapi.Listen(ln.Addr().String(), h, nil); err == nil {
			s.Shutdown(context.Background())
			t.Fatal("Listen on a port in use succeeded")
		}
	})
	t.Run("ShutdownWaitsForARequestInProgress", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			close(entered)
			<-release
			io.WriteString(w, "done")
		})
		s, err := httpapi.Listen("127.0.0.1:0", slow, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			resp, err := http.Get("http://" + s.Addr().String() + "/")
			if err != nil {
				got <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got <- string(b)
		}()
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("request never reached the handler")
		}
		shut := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			shut <- s.Shutdown(ctx)
		}()
		// Let the request finish only once Shutdown has closed the
		// listener, so the test shows Shutdown waiting for it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", s.Addr().String(), time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatal("listener still open 5s after Shutdown began")
			}
			time.Sleep(5 * time.Millisecond)
		}
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) while a request was in progress", err)
		default:
		}
		close(release)
		select {
		case body := <-got:
			if body != "done" {
				t.Errorf("in-flight request got %q, want done", body)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("in-flight request never answered")
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}
