package otel_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/otel"
)

// export is one export request as the collector double received it.
type export struct {
	tls    bool   // it came over TLS
	apiKey string // its api-key header
}

// collector is an OTLP/HTTP receiver double: it accepts every export and
// hands each to the returned channel.
func collector(t *testing.T, withTLS bool) (*httptest.Server, <-chan export) {
	t.Helper()
	got := make(chan export, 16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- export{tls: r.TLS != nil, apiKey: r.Header.Get("api-key")}:
		default:
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewUnstartedServer(h)
	if withTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, got
}

// mustExportOneSpan exports one span through a Provider for url and
// returns the request the collector double received.
func mustExportOneSpan(t *testing.T, url string, got <-chan export) export {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := otel.NewProvider(ctx, otel.ExportConfig{URL: url, ServiceName: "nw-test"})
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	defer func() { _ = p.Shutdown() }()
	_, span := p.Tracer("test").Start(ctx, "one")
	span.End()
	if err := p.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}
	select {
	case e := <-got:
		return e
	case <-ctx.Done():
		t.Fatal("the collector received no export")
		return export{}
	}
}

// The URL's scheme alone decides whether the exporter encrypts, whatever
// OTEL_EXPORTER_OTLP_INSECURE says: config refuses OTLP headers to an
// http:// URL on the strength of it.
func TestNewProvider_SchemeDecidesTLS(t *testing.T) {
	const key = "k3y"
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key="+key)

	t.Run("HTTPInClearDespiteInsecureFalse", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "false")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "false")
		srv, got := collector(t, false)
		e := mustExportOneSpan(t, srv.URL+"/v1/traces", got)
		if e.tls || e.apiKey != key {
			t.Errorf("export tls=%v api-key=%q, want the header in clear text (tls=false, %q)", e.tls, e.apiKey, key)
		}
	})

	t.Run("HTTPSOverTLSDespiteInsecureTrue", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true")
		srv, got := collector(t, true)
		ca := filepath.Join(t.TempDir(), "ca.pem")
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := os.WriteFile(ca, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)
		e := mustExportOneSpan(t, srv.URL+"/v1/traces", got)
		if !e.tls || e.apiKey != key {
			t.Errorf("export tls=%v api-key=%q, want it over TLS (tls=true, %q)", e.tls, e.apiKey, key)
		}
	})
}
