package sigtoken_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.M(m)) }

// Claim accepts a token for the first delivery that uses it and for that
// delivery again (the same ID and body), and refuses it for another
// delivery ID or another body, for as long as the row is kept (the
// signature check refuses the token once its timestamp is past the
// tolerance, and the retention job deletes the row then). Tokens are per
// sender.
func TestClaim(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := sigtoken.New(pool)
	signed := time.Now().UTC().Truncate(time.Second)
	use := func(sender, token, id, body string) sigtoken.Use {
		return sigtoken.Use{Sender: sender, Token: token, SignedAt: signed, DeliveryID: id, RequestSHA256: sha256.Sum256([]byte(body))}
	}
	for i, tc := range []struct {
		use  sigtoken.Use
		want bool
	}{
		{use("mg", "tok-1", "evt-1", "a"), true},                      // a new token
		{use("mg", "tok-1", "evt-1", "a"), true},                      // the same delivery again
		{use("mg", "tok-1", "evt-2", "a"), false},                     // another delivery ID
		{use("mg", "tok-1", "evt-1", "b"), false},                     // the same ID, another body
		{use("other", "tok-1", "evt-2", "b"), true},                   // another sender's token
		{use("mg", "tok-1", "evt-1", "a"), true},                      // still the first delivery's
		{use("mg", string(make([]byte, 64<<10)), "evt-4", "d"), true}, // a long token: its hash is the key
	} {
		got, err := s.Claim(t.Context(), tc.use)
		if err != nil || got != tc.want {
			t.Errorf("%d: Claim(%s, %.10q, %s) = %t, %v; want %t", i, tc.use.Sender, tc.use.Token, tc.use.DeliveryID, got, err, tc.want)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM signature_tokens WHERE token_sha256 = sha256('tok-1')`).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows of tok-1: %d, %v; want 2 (one per sender), keyed by the token's SHA-256", n, err)
	}
	// A failure to reach the database is an error, not a decision.
	ctx, cancel := contextCancelled(t.Context())
	defer cancel()
	if ok, err := s.Claim(ctx, use("mg", "tok-9", "evt-9", "x")); err == nil || ok {
		t.Errorf("Claim with a cancelled context = %t, %v; want an error", ok, err)
	}
}

// Claims of one token by many delivery IDs at once: exactly one holds it,
// every other is refused, and the holder's retries racing with them are
// accepted.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := sigtoken.New(pool)
	now := time.Now()
	const n = 24
	for round := range 5 {
		token := fmt.Sprintf("tok-race-%d", round)
		results := make([]bool, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.Claim(t.Context(), sigtoken.Use{Sender: "mg", Token: token, SignedAt: now, DeliveryID: fmt.Sprintf("evt-%d", i%(n/2)),
					RequestSHA256: sha256.Sum256([]byte("body"))})
			})
		}
		close(start)
		wg.Wait()
		winner := ""
		for i, ok := range results {
			if errs[i] != nil {
				t.Fatalf("round %d, claim %d: %v", round, i, errs[i])
			}
			if !ok {
				continue
			}
			if id := fmt.Sprintf("evt-%d", i%(n/2)); winner == "" {
				winner = id
			} else if id != winner {
				t.Errorf("round %d: the token went to %s and to %s", round, winner, id)
			}
		}
		if winner == "" {
			t.Errorf("round %d: no claim held the token", round)
		}
	}
}

// DeleteSignedBefore deletes a sender's tokens signed before the cutoff in
// batches of at most limit, and nothing else; Senders names the senders
// that have tokens.
func TestDeleteSignedBefore(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := sigtoken.New(pool)
	now := time.Now()
	for i := range 25 {
		for _, sender := range []string{"a", "b"} {
			signed := now.Add(-time.Hour)
			if i%5 == 0 {
				signed = now
			}
			if _, err := s.Claim(t.Context(), sigtoken.Use{Sender: sender, Token: fmt.Sprint(i), SignedAt: signed, DeliveryID: "d"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	senders, err := s.Senders(t.Context())
	if err != nil || fmt.Sprint(senders) != "[a b]" && fmt.Sprint(senders) != "[b a]" {
		t.Fatalf("Senders = %v, %v; want a and b", senders, err)
	}
	var deleted []int64
	for {
		n, err := s.DeleteSignedBefore(t.Context(), "a", now.Add(-time.Minute), 7)
		if err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, n)
		if n < 7 {
			break
		}
	}
	if fmt.Sprint(deleted) != "[7 7 6]" {
		t.Errorf("batches deleted %v, want [7 7 6] (20 signed an hour ago)", deleted)
	}
	var left, leftB int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE sender = 'a'), count(*) FILTER (WHERE sender = 'b') FROM signature_tokens`).Scan(&left, &leftB); err != nil {
		t.Fatal(err)
	}
	if left != 5 || leftB != 25 {
		t.Errorf("left: a %d, b %d; want a's 5 recent tokens, all 25 of b", left, leftB)
	}
}

// contextCancelled returns a context derived from parent, cancelled already.
func contextCancelled(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	cancel()
	return ctx, cancel
}
