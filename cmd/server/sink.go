package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/consumer"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/signature"
)

// defaultSinkAddr is where `hookgate sink` listens by default.
// hookgate.example.yaml's sink target points at it.
const defaultSinkAddr = "127.0.0.1:9099"

// sinkBodyShown is how much of a forward's body the sink prints.
const sinkBodyShown = 2048

// runSink is `hookgate sink`, a forward target for trying hookgate out. It
// prints each request and checks its Standard Webhooks signature. It uses
// the secret of --secret, or else every signing_secret of the
// configuration's targets; without --secret, a configuration it cannot
// load stops it. It answers 204 to a valid signature, or to any request
// when the configuration has no signing secret, and 401 otherwise, until
// ctx is cancelled.
//
// With a database, each valid forward goes through the public consumer
// package's middleware. A redelivery is then recognised as already
// processed, answered with the stored 204 and Idempotent-Replayed, and
// printed as such.
func runSink(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCmdFlags("hookgate sink", "hookgate sink [FLAGS]",
		"A forward target for trying hookgate out: it prints each forward and checks its Standard Webhooks signature.\n"+
			"It refuses to start when --secret is not given and the configuration cannot be loaded.", getenv)
	var addr, secret, cfgPath, dsn string
	c.String(&addr, "addr", "ADDR", "HOOKGATE_SINK_ADDR", defaultSinkAddr, "listen address")
	c.String(&secret, "secret", "whsec_…", "HOOKGATE_SINK_SECRET", "", "the Standard Webhooks secret forwards must be signed with; without it, the targets' signing secrets of --config")
	c.String(&cfgPath, "config", "FILE", "HOOKGATE_CONFIG", "hookgate.yaml", "configuration whose targets' signing secrets are checked when --secret is not given")
	c.String(&dsn, "database-url", "URL", "DATABASE_URL", "", "PostgreSQL URL: process each forward at most once with the consumer package; none: no memory of forwards")
	if done, err := c.parse(args, stdout); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	var keys [][]byte
	from := ""
	if secret != "" {
		k, err := signature.DecodeStandardSecret(secret)
		if err != nil {
			return fmt.Errorf("sink secret: %w (want whsec_ followed by base64)", err)
		}
		keys, from = append(keys, k), "--secret"
	} else {
		// A configuration that cannot be loaded is no reason to accept
		// every request: the sink would then say nothing about signatures.
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return fmt.Errorf("sink: cannot check signatures: no --secret (HOOKGATE_SINK_SECRET) and the configuration cannot be loaded: %w", err)
		}
		for _, sd := range cfg.Senders {
			for _, t := range sd.Forward {
				if t.SigningKey != nil {
					keys = append(keys, t.SigningKey)
				}
			}
		}
		from = "the signing secrets of " + cfgPath
	}
	var verify signature.Verifier
	if len(keys) > 0 {
		verify = signature.StandardWebhooks(keys, 0)
	}

	processed, closeDB, err := sinkConsumer(ctx, dsn, keys)
	if err != nil {
		return err
	}
	defer closeDB()

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("sink: listen: %w", err)
	}
	var mu sync.Mutex // one request printed at a time
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 32<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		status, check, seen := http.StatusNoContent, "not checked (no secret)", ""
		if verify != nil {
			if err := verify.Verify(r.Header, body, time.Now()); err != nil {
				status, check = http.StatusUnauthorized, "INVALID: "+err.Error()
			} else {
				check = "valid"
			}
		}
		if status == http.StatusNoContent && processed != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			rec := &statusRecorder{ResponseWriter: w}
			processed.ServeHTTP(rec, r)
			status, seen = rec.status, "first delivery of this event: processed and recorded"
			switch {
			case w.Header().Get(consumer.HeaderReplayed) == "true":
				seen = "ALREADY PROCESSED: the stored answer was replayed (Idempotent-Replayed: true), nothing applied again"
			case status/100 != 2:
				seen = "not processed (answered " + strconv.Itoa(status) + ")"
			}
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, "sink: %s %s %s\n", time.Now().UTC().Format(time.RFC3339), r.Method, r.URL.RequestURI())
		for _, k := range []string{"X-Hookgate-Sender", "X-Hookgate-Delivery-Id", "Webhook-Id", "Idempotency-Key", "Content-Type"} {
			if v := r.Header.Get(k); v != "" {
				fmt.Fprintf(stdout, "  %s: %s\n", k, printable(v))
			}
		}
		fmt.Fprintf(stdout, "  signature: %s\n  body (%d bytes): %s\n", check, len(body), shownBody(body))
		if seen != "" {
			fmt.Fprintf(stdout, "  consumer: %s\n", seen)
		}
		fmt.Fprintf(stdout, "  answered %d\n", status)
		if processed == nil || status == http.StatusUnauthorized {
			w.WriteHeader(status)
		}
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "sink: listening on http://%s, verifying signatures with %s\n", ln.Addr(), orNone(from, len(keys)))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-done //nolint:errcheck // the server's end after Shutdown
		return err
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("sink: %w", err)
	}
}

// sinkConsumer returns the handler that processes a verified forward at
// most once with the consumer package, or nil without dsn. It also returns
// the function that closes its database. The middleware checks the
// signature again with the targets' secrets.
func sinkConsumer(ctx context.Context, dsn string, keys [][]byte) (http.Handler, func(), error) {
	if dsn == "" {
		return nil, func() {}, nil
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: database: %w", err)
	}
	if err := consumer.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("sink: %w", err)
	}
	secrets := make([]string, len(keys))
	for i, k := range keys {
		secrets[i] = signature.StandardSecretPrefix + base64.StdEncoding.EncodeToString(k)
	}
	mc := consumer.DefaultMiddlewareConfig()
	mc.DB, mc.Consumer, mc.Secrets, mc.Unsigned = pool, "hookgate-sink", secrets, len(keys) == 0
	mw, err := consumer.Middleware(mc)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("sink: %w", err)
	}
	// The example changes no state: the middleware records the event's
	// key.
	return mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })), pool.Close, nil
}

// statusRecorder remembers the status written through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

func orNone(from string, n int) string {
	if n == 0 {
		return "nothing: the configuration loaded, but none of its targets has a signing_secret, and no --secret was given; every request is accepted"
	}
	return fmt.Sprintf("%s (%d)", from, n)
}

// shownBody returns up to sinkBodyShown bytes of b. It is text when b is
// UTF-8, and quoted otherwise.
func shownBody(b []byte) string {
	cut := ""
	if len(b) > sinkBodyShown {
		b, cut = b[:sinkBodyShown], " …"
	}
	if utf8.Valid(b) {
		return printable(string(b)) + cut
	}
	return fmt.Sprintf("%q", b) + cut
}

// printable replaces control characters, such as terminal escapes, in s.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		// C0 and DEL; C1, an 8-bit CSI among them; the bidirectional
		// controls.
		switch {
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f,
			r >= 0x80 && r <= 0x9f,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return '.'
		}
		return r
	}, s)
}
