package handler_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// holdKey claims (sender, id) for body in a transaction on its own
// connection and leaves it open, as a concurrent delivery still being
// processed would. The transaction is rolled back at the end of the test if
// the test has not ended it. It returns the transaction and the event ID and
// response body it stored.
func holdKey(t *testing.T, pool *pgxpool.Pool, sender, id string, body []byte) (pgx.Tx, uuid.UUID, []byte) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	eventID := uuid.Must(uuid.NewV7())
	resp := []byte(`{"held":"` + eventID.String() + `"}` + "\n")
	sum := sha256.Sum256(body)
	now := time.Now()
	err = storetest.InsertKey(ctx, tx, idempotency.Delivery{Key: idempotency.Key{Sender: sender, DeliveryID: id}, RequestSHA256: sum, EventID: eventID,
		Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: resp}, ReceivedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatalf("hold key: %v", err)
	}
	return tx, eventID, resp
}

// Scenario (a): many concurrent deliveries of one delivery ID, released
// together, are accepted once; every other one replays that acceptance.
func TestIngestConcurrentDuplicatesAreAcceptedOnce(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	// Enough connections for the requests to meet at the unique index rather
	// than queue for a connection.
	pool := newPool(t, dsn, 16)
	s := newServer(t, pool, options{wait: time.Minute})
	s.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64

	const n = 64
	body := []byte(`{"event":"order.created","id":7}`)
	var (
		ready, done sync.WaitGroup
		start       = make(chan struct{})
		replies     = make([]reply, n)
		errs        = make([]error, n)
	)
	ready.Add(n)
	done.Add(n)
	for i := range n {
		req := s.postRequest("hdr", "evt-concurrent", body)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			replies[i], errs[i] = s.send(req)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()

	var first []byte
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		r := replies[i]
		if r.status != http.StatusAccepted {
			t.Errorf("request %d: %s", i, r)
			continue
		}
		if first == nil {
			first = r.body
		} else if !bytes.Equal(r.body, first) {
			t.Errorf("request %d: body %q differs from %q", i, r.body, first)
		}
		if !r.replayed() {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d responses without Idempotent-Replayed, want exactly 1", fresh)
	}
	wantCounts(t, pool, 1, 1)
	var a acceptedBody
	if err := json.Unmarshal(first, &a); err != nil {
		t.Fatal(err)
	}
	if e := readEvent(t, pool, "hdr", "evt-concurrent"); e.id.String() != a.EventID {
		t.Errorf("stored event %s, responses carry %s", e.id, a.EventID)
	}
}

// A delivery whose key is held by a transaction still open after the
// in-flight wait gets 409 with Retry-After and records nothing; once the
// holder rolls back, the retry is accepted as the first delivery.
func TestIngestInFlightIs409(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{wait: 300 * time.Millisecond})
	body := []byte(`{"n":1}`)
	tx, _, _ := holdKey(t, pool, "hdr", "evt-held", body)

	r := s.post("hdr", "evt-held", body)
	wantProblem(t, r, http.StatusConflict, "in-flight")
	wantRetryAfter(t, r)
	// A different body while held is in flight too, not a mismatch: the
	// holder has not committed.
	r = s.post("hdr", "evt-held", []byte(`{"n":2}`))
	wantProblem(t, r, http.StatusConflict, "in-flight")

	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, pool, 0, 0)
	wantAccepted(t, s.post("hdr", "evt-held", body), "hdr", "evt-held")
	wantCounts(t, pool, 1, 1)
}

// A delivery waiting for a concurrent delivery of the same key gets the
// outcome of that delivery: a replay of its response when it commits, and
// the acceptance of its own when it rolls back.
func TestIngestWaitsForConcurrentDelivery(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "holder commits", false: "holder rolls back"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := newDBServer(t, options{wait: time.Minute})
			body := []byte(`{"n":1}`)
			tx, heldEvent, heldResp := holdKey(t, pool, "hdr", "evt-wait", body)

			type result struct {
				r   reply
				err error
			}
			res := make(chan result, 1)
			req := s.postRequest("hdr", "evt-wait", body)
			go func() {
				r, err := s.send(req)
				res <- result{r, err}
			}()
			testkit.Poll(t, pollTimeout, "the delivery to wait on the held key", func() bool { return lockWaiters(t, pool) > 0 })

			ctx := t.Context()
			var err error
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := <-res
			if got.err != nil {
				t.Fatal(got.err)
			}
			if commit {
				if got.r.status != http.StatusAccepted || !got.r.replayed() || !bytes.Equal(got.r.body, heldResp) {
					t.Errorf("got %s (replayed %v); want a replay of the holder's %q", got.r, got.r.replayed(), heldResp)
				}
				if k := readKey(t, pool, "hdr", "evt-wait"); k.eventID != heldEvent {
					t.Errorf("stored event_id %s, want the holder's %s", k.eventID, heldEvent)
				}
				wantCounts(t, pool, 1, 0) // the holder stored no event
			} else {
				a := wantAccepted(t, got.r, "hdr", "evt-wait")
				if a.EventID == heldEvent.String() {
					t.Errorf("accepted with the rolled-back holder's event ID")
				}
				wantCounts(t, pool, 1, 1)
			}
		})
	}
}

// writeAndHangUp sends a complete POST on a new connection and closes the
// connection at once, without reading the response.
func writeAndHangUp(t *testing.T, s *server, sender, id string, body []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	req := "POST /webhooks/" + sender + " HTTP/1.1\r\nHost: hookgate\r\nContent-Type: application/json\r\n" +
		"X-Delivery-Id: " + id + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
	_, werr := io.WriteString(conn, req)
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
}

// keyExists reports whether processed_messages has (sender, id).
func keyExists(t *testing.T, pool *pgxpool.Pool, sender, id string) bool {
	t.Helper()
	var ok bool
	err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM processed_messages
WHERE sender = $1 AND delivery_id = $2)`, sender, id).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// wantReplayOfStored checks that a retry of (sender, id) replays the stored
// acceptance and that exactly one event exists.
func wantReplayOfStored(t *testing.T, s *server, pool *pgxpool.Pool, sender, id string, body []byte) {
	t.Helper()
	k := readKey(t, pool, sender, id)
	r := s.post(sender, id, body)
	if r.status != http.StatusAccepted || !r.replayed() {
		t.Fatalf("retry: %s (replayed %v); want 202 with Idempotent-Replayed: true", r, r.replayed())
	}
	if !bytes.Equal(r.body, k.body) {
		t.Errorf("retry body %q, stored %q", r.body, k.body)
	}
	var a acceptedBody
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatal(err)
	}
	if a.EventID != k.eventID.String() || a.DeliveryID != id {
		t.Errorf("retry event_id, delivery_id = %s, %s; stored %s, %s", a.EventID, a.DeliveryID, k.eventID, id)
	}
	if e := readEvent(t, pool, sender, id); e.id != k.eventID || !bytes.Equal(e.body, body) {
		t.Errorf("event %s %q; want %s %q", e.id, e.body, k.eventID, body)
	}
	wantCounts(t, pool, 1, 1)
}

// Scenario (c): the sender hangs up right after sending the request. The
// ingest transaction is detached from the request's context, so it still
// commits, and the sender's retry replays it.
func TestIngestCommitsWhenClientGoesAway(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	body := []byte(`{"n":"gone"}`)
	writeAndHangUp(t, s, "hdr", "evt-gone", body)
	testkit.Poll(t, pollTimeout, "the abandoned delivery to commit", func() bool { return keyExists(t, pool, "hdr", "evt-gone") })
	wantReplayOfStored(t, s, pool, "hdr", "evt-gone", body)
}

// Scenario (c), made deterministic: the delivery is still waiting on the
// key's lock when its client has long gone (so its request context is
// cancelled); it must still commit once the lock is released.
func TestIngestCommitsWhenClientGoesAwayDuringLockWait(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{wait: time.Minute})
	body := []byte(`{"n":"gone"}`)
	tx, heldEvent, _ := holdKey(t, pool, "hdr", "evt-gone", body)
	writeAndHangUp(t, s, "hdr", "evt-gone", body)
	// Were the ingest transaction tied to the request's context, it would be
	// cancelled before (or while) waiting, and this or the next poll would
	// time out.
	testkit.Poll(t, pollTimeout, "the abandoned delivery to wait on the held key", func() bool { return lockWaiters(t, pool) > 0 })
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, pollTimeout, "the abandoned delivery to commit", func() bool { return keyExists(t, pool, "hdr", "evt-gone") })
	if k := readKey(t, pool, "hdr", "evt-gone"); k.eventID == heldEvent {
		t.Fatal("the rolled-back holder's row is visible")
	}
	wantReplayOfStored(t, s, pool, "hdr", "evt-gone", body)
}
