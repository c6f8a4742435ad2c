package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// maxShownBody is the most of a body the delivery page shows; the rest is
// behind the raw body link.
const maxShownBody = 64 << 10

// bodyView is a body as the delivery page shows it.
type bodyView struct {
	Kind      string // "json", "text", "hex" or "empty"
	Text      string
	Size      int
	Truncated bool
}

type headerView struct{ Name, Value string }

// forwardView is a forward of the delivery page.
type forwardView struct {
	Target, URL, State, LastError string
	// Held says why an unfinished forward waits though its attempt is due.
	// An operator's pause, the target's breaker, a pause the target asked
	// for or a removed target can hold it.
	Held                   string
	JobID                  int64
	Attempts, MaxAttempts  int
	LastStatus             int
	CreatedAt, DeliveredAt time.Time
	// Ack is a broker's acknowledgement of the delivered forward.
	Ack string
}

// attemptView is one attempt of a forward on the delivery page.
type attemptView struct {
	Target, Outcome, Cause, Ack, Error string
	StartedAt                          time.Time
	Took                               string
	Status                             int
	Headers                            []headerView
	Body                               bodyView
}

// showAttempt shows an attempt: its headers (redacted when recorded) in
// order, its body as text, JSON or a hex dump, escaped by the template.
func showAttempt(a store.Attempt) attemptView {
	v := attemptView{Target: a.Target, Outcome: a.Outcome, Cause: a.CauseText(), Ack: a.Ack, Error: a.Error,
		StartedAt: a.StartedAt, Took: a.Took.Round(time.Microsecond).String(), Status: a.Status,
		Body: showBody(http.Header(a.Header).Get("Content-Type"), a.Body)}
	for _, name := range slices.Sorted(maps.Keys(a.Header)) {
		for _, val := range a.Header[name] {
			v.Headers = append(v.Headers, headerView{name, val})
		}
	}
	return v
}

// deliveryView is the delivery page's data.
type deliveryView struct {
	Sender   string
	Rec      store.Delivery
	SHA256   string
	Response bodyView
	HasEvent bool
	Event    events.Event
	Headers  []headerView
	Body     bodyView
	Forwards []forwardView
	// Attempts are the kept attempts of the event's forwards, newest
	// first.
	Attempts   []attemptView
	HasTargets bool
	// Redelivered is how many forwards the redelivery that led here
	// enqueued, or -1. After is how many of them wait for a forward that
	// was running or retrying.
	Redelivered, After int
}

// delivery shows a delivery, its event's headers and body, and its
// forwards.
func (c *Console) delivery(w http.ResponseWriter, r *http.Request) {
	sender, id := param(r, "sender"), deliveryID(r)
	sd, rec, ok := c.lookupDelivery(w, r, sender, id)
	if !ok {
		return
	}
	v := deliveryView{Sender: sender, Rec: rec, SHA256: hex.EncodeToString(rec.RequestSHA256[:]),
		Response: showBody(rec.Response.ContentType, rec.Response.Body), HasTargets: len(sd.Forward) > 0,
		Redelivered: -1}
	if n, err := strconv.Atoi(r.URL.Query().Get("redelivered")); err == nil && n >= 0 {
		v.Redelivered = n
		if a, err := strconv.Atoi(r.URL.Query().Get("after")); err == nil && a >= 0 && a <= n {
			v.After = a
		}
	}
	e, err := c.q.GetEvent(r.Context(), rec.EventID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		c.fail(w, r, err)
		return
	default:
		v.HasEvent, v.Event = true, e
		for _, name := range slices.Sorted(mapsKeys(e.Headers)) {
			for _, val := range e.Headers[name] {
				v.Headers = append(v.Headers, headerView{name, val})
			}
		}
		v.Body = showBody(e.Headers.Get("Content-Type"), e.Body)
	}
	fwds, err := c.forwards.EventForwards(r.Context(), sender, rec.EventID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var (
		breakers map[string]store.BreakerState
		pauses   map[string]store.TargetPause
	)
	if len(fwds) > 0 {
		if breakers, err = c.q.Breakers(r.Context(), sender); err != nil {
			c.fail(w, r, err)
			return
		}
		if pauses, err = c.q.TargetPausesOf(r.Context(), sender); err != nil {
			c.fail(w, r, err)
			return
		}
	}
	now := c.opts.Now()
	for _, f := range fwds {
		fv := showForward(sd, f)
		if fv.Held == "" && f.State != queue.StateRunning && f.State.Unfinished() {
			fv.Held, _ = heldBy(breakers[f.Target], forward.ActivePause(pauses, f.Target, now), now)
		}
		if t, ok := sd.Target(f.Target); ok && fv.Held == "" && f.State != queue.StateRunning && f.State.Unfinished() {
			fv.Held, _ = heldByRate(t)
		}
		v.Forwards = append(v.Forwards, fv)
	}
	attempts, err := c.q.EventAttempts(r.Context(), sender, rec.EventID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	for _, a := range attempts {
		v.Attempts = append(v.Attempts, showAttempt(a))
	}
	c.render(w, r, http.StatusOK, "delivery", page{Title: "Delivery " + id, Data: v})
}

func mapsKeys(h http.Header) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}
}

// showForward shows f with its target's URL redacted, as the JSON API does.
func showForward(sd *config.Sender, f queue.Forward) forwardView {
	sh := forward.Show(sd, f)
	return forwardView{Target: sh.Target, URL: sh.URL, State: string(sh.State), JobID: sh.JobID, Attempts: sh.Attempts, MaxAttempts: sh.MaxAttempts,
		LastStatus: sh.LastStatus, CreatedAt: sh.CreatedAt, DeliveredAt: sh.DeliveredAt, LastError: sh.LastError, Held: shownHeld(sh.Held), Ack: sh.Ack}
}

// showBody shows a body cut to [maxShownBody]. Valid JSON of a JSON
// content type is pretty-printed. Text without control characters is shown
// as is, anything else as a hex dump.
func showBody(contentType string, body []byte) bodyView {
	v := bodyView{Size: len(body)}
	if len(body) == 0 {
		v.Kind = "empty"
		return v
	}
	shown := body
	if len(shown) > maxShownBody {
		shown, v.Truncated = shown[:maxShownBody], true
	}
	if !v.Truncated && strings.Contains(strings.ToLower(contentType), "json") && json.Valid(body) {
		var buf bytes.Buffer
		if json.Indent(&buf, body, "", "  ") == nil {
			v.Kind, v.Text = "json", buf.String()
			return v
		}
	}
	if isText(shown, v.Truncated) {
		v.Kind, v.Text = "text", string(shown)
		return v
	}
	v.Kind, v.Text = "hex", hex.Dump(shown)
	return v
}

// isText reports whether b is UTF-8 text without control characters but
// tab, CR and LF. A truncated body may end in a cut character.
func isText(b []byte, truncated bool) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return truncated && len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
		b = b[n:]
	}
	return true
}

// rawBody serves an event's stored body as a download, never rendered.
func (c *Console) rawBody(w http.ResponseWriter, r *http.Request) {
	_, rec, ok := c.lookupDelivery(w, r, param(r, "sender"), deliveryID(r))
	if !ok {
		return
	}
	e, err := c.q.GetEvent(r.Context(), rec.EventID)
	if errors.Is(err, store.ErrNotFound) {
		c.notFound(w, r, "The event of this delivery is no longer stored.")
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+e.ID.String()+`.body"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(e.Body)))
	_, _ = w.Write(e.Body)
}

// redeliver enqueues the delivery's forwards again, then shows the
// delivery page.
func (c *Console) redeliver(w http.ResponseWriter, r *http.Request) {
	sender, id := param(r, "sender"), deliveryID(r)
	sd, ok := c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return
	}
	if len(sd.Forward) == 0 {
		c.render(w, r, http.StatusConflict, "error", page{Title: "Nothing to redeliver", Message: "This sender has no forward targets configured."})
		return
	}
	if c.opts.Redeliverer == nil {
		c.fail(w, r, errors.New("console: no redelivery (console.Config.Redeliverer)"))
		return
	}
	_, rec, ok := c.lookupDelivery(w, r, sender, id)
	if !ok {
		return
	}
	jobs, err := c.opts.Redeliverer.Redeliver(r.Context(), sd, rec.EventID, rec.DeliveryID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	n, after := 0, 0
	for _, j := range jobs {
		if !j.AlreadyPending {
			n++
			if j.AfterCurrent {
				after++
			}
		}
	}
	to := deliveryURL(sender, id, "")
	sep := "?"
	if strings.Contains(to, "?") {
		sep = "&"
	}
	http.Redirect(w, r, to+sep+"redelivered="+strconv.Itoa(n)+"&after="+strconv.Itoa(after), http.StatusSeeOther)
}

// lookupDelivery returns the configured sender and its delivery id. When
// either is missing or the read fails, it has answered 404 or 503 and ok
// is false.
func (c *Console) lookupDelivery(w http.ResponseWriter, r *http.Request, sender, id string) (sd *config.Sender, rec store.Delivery, ok bool) {
	sd, ok = c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return nil, rec, false
	}
	if idempotency.CheckDeliveryID(id) != "" { // what ingest refuses was never stored
		c.notFound(w, r, "This sender has no such delivery (never received, or its key has expired).")
		return nil, rec, false
	}
	rec, err := c.q.GetDelivery(r.Context(), idempotency.Key{Sender: sender, DeliveryID: id})
	if errors.Is(err, store.ErrNotFound) {
		c.notFound(w, r, "This sender has no such delivery (never received, or its key has expired).")
		return nil, rec, false
	}
	if err != nil {
		c.fail(w, r, err)
		return nil, rec, false
	}
	return sd, rec, true
}
