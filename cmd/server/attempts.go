package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/store"
)

// attempts is `hookgate attempts EVENT_ID`: every kept attempt of the
// event's forwards, newest first, with its answer, as the operator API's
// GET /v1/events/{event_id}/attempts gives them. Header values and bodies
// are printed quoted, Go-escaped: a target's answer never writes control
// characters to the terminal.
func attempts(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hookgate attempts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hookgate attempts [--database-url URL] EVENT_ID")
		fs.PrintDefaults()
	}
	var databaseURL string
	fs.StringVar(&databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL connection URL (env DATABASE_URL; required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("attempts: give one event ID")
	}
	id, err := uuid.Parse(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("attempts: %q is not an event ID (a UUID)", fs.Arg(0))
	}
	if databaseURL == "" {
		return errors.New("DATABASE_URL is not set: give the PostgreSQL URL in DATABASE_URL or --database-url")
	}
	pool, err := newPool(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := store.New(pool)
	e, err := q.GetEvent(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("attempts: no event %s is stored", id)
	}
	if err != nil {
		return err
	}
	as, err := q.EventAttempts(ctx, e.Sender, e.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "event %s of %s: %d attempts kept, newest first\n", e.ID, e.Sender, len(as))
	for _, a := range as {
		answer := "-"
		switch {
		case a.Status != 0:
			answer = strconv.Itoa(a.Status)
		case a.Ack != "":
			answer = a.Ack
		}
		fmt.Fprintf(stdout, "\n%s  %s  %s  %s  took %s  %s\n", a.StartedAt.UTC().Format("2006-01-02 15:04:05.000 UTC"), a.Target, a.Outcome, answer,
			a.Took.Round(time.Microsecond), a.CauseText())
		if a.Error != "" {
			fmt.Fprintf(stdout, "  error: %s\n", strconv.Quote(a.Error))
		}
		for _, name := range slices.Sorted(maps.Keys(a.Header)) {
			for _, v := range a.Header[name] {
				fmt.Fprintf(stdout, "  %s: %s\n", name, strconv.Quote(v))
			}
		}
		if len(a.Body) > 0 {
			fmt.Fprintf(stdout, "  body (first %d bytes): %s\n", len(a.Body), strconv.Quote(string(a.Body)))
		}
	}
	return nil
}
