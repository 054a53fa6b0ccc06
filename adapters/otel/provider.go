package otel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ExportConfig says where and as whom the worker exports its spans.
type ExportConfig struct {
	// URL is the OTLP/HTTP traces endpoint, path included
	// (http://collector:4318/v1/traces). Required.
	URL string
	// ServiceName and ServiceVersion are the service.name and
	// service.version of every span's resource.
	ServiceName, ServiceVersion string
	// Logger receives OpenTelemetry's errors (an export that failed) as
	// tracing_export_failed warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Provider is an SDK tracer provider exporting over OTLP/HTTP in batches.
// Shutdown flushes what is queued and must be called once, at exit.
type Provider struct {
	*sdktrace.TracerProvider
}

// NewProvider returns a Provider exporting to cfg.URL. It does not dial:
// an unreachable collector shows as tracing_export_failed warnings later
// (it sets OpenTelemetry's global error handler to log them to
// cfg.Logger), never as a failed start or a slower record: spans that
// cannot be queued are dropped. Besides the URL, the exporter reads the standard
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression,
// certificates), and the SDK OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
// OTEL_BSP_* and OTEL_RESOURCE_ATTRIBUTES: those are OpenTelemetry's own
// contract with the operator, documented by it.
func NewProvider(ctx context.Context, cfg ExportConfig) (*Provider, error) {
	if cfg.URL == "" {
		return nil, errors.New("otel: no traces endpoint URL")
	}
	log := cfg.Logger
	log = cmp.Or(log, slog.Default())
	otelapi.SetErrorHandler(otelapi.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing_export_failed", slog.String("error", err.Error()))
	}))
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.URL))
	if err != nil {
		return nil, fmt.Errorf("otel: OTLP exporter for %s: %w", cfg.URL, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(cfg.ServiceName),
		semconv.ServiceVersion(cfg.ServiceVersion),
	))
	if err != nil {
		return nil, fmt.Errorf("otel: resource: %w", err)
	}
	return &Provider{sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// ShutdownTimeout bounds how long Shutdown waits for the last spans to be
// exported: a collector that is down must not hold the worker's exit.
const ShutdownTimeout = 5 * time.Second

// Shutdown exports the spans still queued, within ShutdownTimeout, and
// stops the provider.
func (p *Provider) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	return p.TracerProvider.Shutdown(ctx)
}
