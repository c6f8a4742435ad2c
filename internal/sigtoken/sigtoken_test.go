package sigtoken_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/pgtest"
	"github.com/hookgate/hookgate/internal/sigtoken"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.M(m)) }

// Claim accepts a token for the first delivery that uses it and for that
// delivery again (the same ID and body), and refuses it for another
// delivery ID or another body, until it expires; an expired token is
// taken over by the next delivery. Tokens are per sender.
func TestClaim(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := sigtoken.New(pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	use := func(sender, token, id, body string, expires time.Time) sigtoken.Use {
		return sigtoken.Use{Sender: sender, Token: token, DeliveryID: id, RequestSHA256: sha256.Sum256([]byte(body)), ExpiresAt: expires}
	}
	live := now.Add(5 * time.Minute)
	for i, tc := range []struct {
		use  sigtoken.Use
		at   time.Time
		want bool
	}{
		{use("mg", "tok-1", "evt-1", "a", live), now, true},                          // a new token
		{use("mg", "tok-1", "evt-1", "a", live), now.Add(time.Second), true},         // the same delivery again
		{use("mg", "tok-1", "evt-2", "a", live), now, false},                         // another delivery ID
		{use("mg", "tok-1", "evt-1", "b", live), now, false},                         // the same ID, another body
		{use("other", "tok-1", "evt-2", "b", live), now, true},                       // another sender's token
		{use("mg", "tok-1", "evt-2", "a", live), live.Add(-time.Microsecond), false}, // still live
		{use("mg", "tok-1", "evt-3", "c", live.Add(time.Hour)), live, true},          // expired: taken over
		{use("mg", "tok-1", "evt-1", "a", live), live, false},                        // and now evt-3's
		{use("mg", "tok-1", "evt-3", "c", live.Add(time.Hour)), live, true},
		{use("mg", string(make([]byte, 64<<10)), "evt-4", "d", live), now, true}, // a long token: its hash is the key
	} {
		got, err := s.Claim(t.Context(), tc.use, tc.at)
		if err != nil || got != tc.want {
			t.Errorf("%d: Claim(%s, %.10q, %s, at %s) = %t, %v; want %t", i, tc.use.Sender, tc.use.Token, tc.use.DeliveryID, tc.at.Sub(now), got, err, tc.want)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM signature_tokens WHERE token_sha256 = sha256('tok-1')`).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows of tok-1: %d, %v; want 2 (one per sender), keyed by the token's SHA-256", n, err)
	}
	// A failure to reach the database is an error, not a decision.
	done := t.Context()
	ctx, cancel := contextCancelled(done)
	defer cancel()
	if ok, err := s.Claim(ctx, use("mg", "tok-9", "evt-9", "x", live), now); err == nil || ok {
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
				results[i], errs[i] = s.Claim(t.Context(), sigtoken.Use{Sender: "mg", Token: token, DeliveryID: fmt.Sprintf("evt-%d", i%(n/2)),
					RequestSHA256: sha256.Sum256([]byte("body")), ExpiresAt: now.Add(time.Minute)}, now)
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

// DeleteExpired deletes a sender's expired tokens in batches of at most
// limit, and nothing else; ExpiredSenders names the senders that have some.
func TestDeleteExpired(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := sigtoken.New(pool)
	now := time.Now()
	for i := range 25 {
		for _, sender := range []string{"a", "b"} {
			expires := now.Add(-time.Minute)
			if i%5 == 0 {
				expires = now.Add(time.Minute)
			}
			if _, err := s.Claim(t.Context(), sigtoken.Use{Sender: sender, Token: fmt.Sprint(i), DeliveryID: "d", ExpiresAt: expires}, now.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	senders, err := s.ExpiredSenders(t.Context(), now)
	if err != nil || fmt.Sprint(senders) != "[a b]" && fmt.Sprint(senders) != "[b a]" {
		t.Fatalf("ExpiredSenders = %v, %v; want a and b", senders, err)
	}
	var deleted []int64
	for {
		n, err := s.DeleteExpired(t.Context(), "a", now, 7)
		if err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, n)
		if n < 7 {
			break
		}
	}
	if fmt.Sprint(deleted) != "[7 7 6]" {
		t.Errorf("batches deleted %v, want [7 7 6] (20 expired)", deleted)
	}
	var left, leftB int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE sender = 'a'), count(*) FILTER (WHERE sender = 'b') FROM signature_tokens`).Scan(&left, &leftB); err != nil {
		t.Fatal(err)
	}
	if left != 5 || leftB != 25 {
		t.Errorf("left: a %d, b %d; want 5 live tokens of a, all 25 of b", left, leftB)
	}
}

// contextCancelled returns a context derived from parent, cancelled already.
func contextCancelled(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	cancel()
	return ctx, cancel
}
