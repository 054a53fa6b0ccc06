// Command twiliodouble serves the Twilio test double (package double) on a
// port of 127.0.0.1, for tests that run the worker as a container or a
// separate process and need provider behaviour they can script.
//
// Flags (each also read from the environment variable named in brackets):
//
//	-addr         [TWILIO_DOUBLE_ADDR]  listen address (default 127.0.0.1:8089)
//	-account-sid  [TWILIO_ACCOUNT_SID]  accepted account SID (default ACtest)
//	-auth-token   [TWILIO_AUTH_TOKEN]   accepted auth token (default secret)
//	-rate         [TWILIO_DOUBLE_RATE]  sends a second allowed per sender, beyond
//	                                    which it answers 429 (default 0: no limit)
//	-burst        [TWILIO_DOUBLE_BURST] sends at once per sender after it was
//	                                    idle, with -rate (default 1)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	if err := run(os.Args[1:]); err != nil {
		log.Fatalf("twiliodouble: %v", err)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("twiliodouble", flag.ContinueOnError)
	addr := fs.String("addr", envOr("TWILIO_DOUBLE_ADDR", "127.0.0.1:8089"), "listen address")
	sid := fs.String("account-sid", envOr("TWILIO_ACCOUNT_SID", "ACtest"), "accepted account SID")
	token := fs.String("auth-token", envOr("TWILIO_AUTH_TOKEN", "secret"), "accepted auth token")
	rate := fs.String("rate", envOr("TWILIO_DOUBLE_RATE", "0"), "sends a second allowed per sender (0: no limit)")
	burst := fs.String("burst", envOr("TWILIO_DOUBLE_BURST", "1"), "sends at once per sender after it was idle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	limit, err := rateLimit(*rate, *burst)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	d := double.New(*sid, *token)
	d.LimitRate(limit)
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	// The harness waits for this exact line.
	log.Printf("twilio double listening on %s", ln.Addr())

	// As PID 1 in a container nothing handles SIGTERM unless we do.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(d.Listener(ln)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// rateLimit reads the -rate and -burst values.
func rateLimit(rate, burst string) (double.RateLimit, error) {
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return double.RateLimit{}, fmt.Errorf("-rate (TWILIO_DOUBLE_RATE) %q: want a number of sends a second, 0 or more", rate)
	}
	b, err := strconv.Atoi(burst)
	if err != nil || b < 1 {
		return double.RateLimit{}, fmt.Errorf("-burst (TWILIO_DOUBLE_BURST) %q: want a whole number, 1 or more", burst)
	}
	return double.RateLimit{PerSecond: r, Burst: b}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
