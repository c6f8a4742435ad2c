package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
)

// page is what every template gets: the layout's fields and the page's
// own data.
type page struct {
	Title    string
	SignedIn bool
	CSRF     string
	Message  string // an error shown at the top (role alert)
	Notice   string // information shown at the top (role status)
	Data     any
}

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"path": url.PathEscape,
	// delivery is the address of a delivery's page (deliveryURL).
	"delivery": deliveryURL,
	"add":      func(a, b float64) float64 { return a + b },
	// kind is how a chart names a kind of count (kindLabel).
	"kind": kindLabel,
}

// parsePages parses each page template with the layout.
func parsePages() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, n))
	}
	return out
}

// render writes the page name with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if s, ok, _ := c.session(r); ok {
		p.SignedIn, p.CSRF = true, c.csrf(s)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows a failed database read or write as a 503 page, logging why.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Error("console: database", "path", r.URL.Path, "err", err)
	c.render(w, r, http.StatusServiceUnavailable, "error", page{Title: "Database unavailable", Message: "The database could not be read or written. Retry in a moment."})
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request, msg string) {
	c.render(w, r, http.StatusNotFound, "error", page{Title: "Not found", Message: msg})
}

// disabled is the page of every console address when no admin token is
// configured.
func (c *Console) disabled(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusForbidden, "disabled", page{Title: "Console disabled"})
}

// requireSession lets signed-in requests through; it sends others to the
// sign-in page (a GET) or refuses them 403 (a POST). A POST must also come
// from this console (crossSite) and carry the session's CSRF token in the
// form field csrf_token.
func (c *Console) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.key == nil {
			c.disabled(w, r)
			return
		}
		s, ok, err := c.session(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if ok {
			r = r.WithContext(context.WithValue(r.Context(), sessionKeyCtx{}, s))
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if !ok {
				http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if why := crossSite(r); why != "" {
			c.forbidden(w, r, "This request was refused because "+why+".")
			return
		}
		if !ok {
			c.forbidden(w, r, "You are not signed in (or your session expired). Sign in and try again.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		got := r.PostFormValue("csrf_token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf(s))) != 1 {
			c.forbidden(w, r, "This request was refused: its CSRF token is missing or wrong. Go back, reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Console) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	c.render(w, r, http.StatusForbidden, "error", page{Title: "Forbidden", Message: msg})
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.key == nil {
		c.disabled(w, r)
		return
	}
	if _, ok, _ := c.session(r); ok {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in"})
}

// login signs in with the admin token in the form field token. Wrong
// tokens count against the client's address in the shared limiter; past
// its burst a wrong token is answered 429. The right token always signs in.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.key == nil {
		c.disabled(w, r)
		return
	}
	if why := crossSite(r); why != "" {
		c.forbidden(w, r, "This sign-in was refused because "+why+".")
		return
	}
	// The token is looked at first: the right one always signs in, whatever
	// failures came from the same address.
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	d := sha256.Sum256([]byte(r.PostFormValue("token")))
	if subtle.ConstantTimeCompare(d[:], c.digest[:]) != 1 {
		if wait := c.opts.Limiter.Blocked(r); wait > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			c.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Sign in",
				Message: fmt.Sprintf("Too many wrong tokens came from your address. Wait %d seconds and try again.", int(wait.Seconds())+1)})
			return
		}
		c.opts.Limiter.Failed(r)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in",
			Message: "That is not the admin token. Paste the value of HOOKGATE_ADMIN_TOKEN (make run prints it)."})
		return
	}
	http.SetCookie(w, c.newCookie(r))
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

// logout ends this session: it is recorded as revoked, so that a copy of
// its cookie is refused by every process on the database, and the cookie
// is deleted.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	s, _, _ := c.session(r) // requireSession found it
	if err := c.q.RevokeSession(r.Context(), s.id, s.expires, c.opts.Now()); err != nil {
		c.fail(w, r, err)
		return
	}
	c.signedOut(w, r)
}

// logoutEverywhere ends every session issued until now, this one included,
// in every process on the database.
func (c *Console) logoutEverywhere(w http.ResponseWriter, r *http.Request) {
	if err := c.q.RevokeAllSessions(r.Context(), c.opts.Now()); err != nil {
		c.fail(w, r, err)
		return
	}
	c.signedOut(w, r)
}

// signedOut deletes the session cookie and sends the browser to the
// sign-in page.
func (c *Console) signedOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// The overview.

type senderView struct {
	Name    string
	Counts  []store.StatusCount
	Charts  []chart // deliveries: last hour, last day
	Targets []targetView
}

type targetView struct {
	Name, URL string
	// Held says that the target is not configured (removed by a reload)
	// and its unfinished forwards wait for it (forward.HeldTargetRemoved);
	// "" for a configured target.
	Held    string
	Breaker breakerShown
	// Paused is an operator's pause that holds the target's forwards; nil
	// when none does.
	Paused                             *store.TargetPause
	Pending, Running, Retrying, Failed int64
	Charts                             []chart // forwards: last hour, last day
	// P50 and P95 are the latency quantiles of the last hour's attempts.
	P50, P95 latency
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := c.opts.Now()
	var out []senderView
	cfg := c.config()
	for i := range cfg.Senders {
		sd := &cfg.Senders[i]
		counts, err := c.q.CountDeliveries(ctx, sd.Name, now)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		charts, targetCharts, err := c.senderCharts(ctx, sd.Name, now)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		sv := senderView{Name: sd.Name, Counts: counts, Charts: charts}
		// The API's counts (GET /v1/senders/{sender}/targets), without the
		// delivered ones, which the overview does not show.
		byTarget, err := c.jobs.CountForwards(ctx, sd.Name, false)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if len(sd.Forward) > 0 {
			breakers, err := c.q.Breakers(ctx, sd.Name)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			pauses, err := c.q.TargetPausesOf(ctx, sd.Name)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			for _, t := range sd.Forward {
				b, ok := breakers[t.Name]
				if !ok {
					b = store.BreakerState{State: store.BreakerClosed}
				}
				n := byTarget[t.Name]
				tv := targetView{Name: t.Name, URL: redact.URL(t.URL, t.SecretPath), Breaker: showBreaker(b, now), Paused: forward.ActivePause(pauses, t.Name, now),
					Pending: n.Pending, Running: n.Running, Retrying: n.Retrying, Failed: n.Failed, Charts: targetCharts[t.Name]}
				if len(tv.Charts) > 0 {
					tv.P50, tv.P95 = tv.Charts[0].P50, tv.Charts[0].P95
				}
				sv.Targets = append(sv.Targets, tv)
			}
		}
		// Targets removed from the configuration whose forwards wait for
		// them: shown, held, until they are configured again.
		sv.Targets = append(sv.Targets, removedTargets(sd, byTarget)...)
		out = append(out, sv)
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Data: out})
}

// removedTargets returns, by name, the targets of counts (sd's forwards by
// target) that sd no longer has and that have unfinished forwards: held
// until a target of that name is configured again.
func removedTargets(sd *config.Sender, counts map[string]queue.Counts) []targetView {
	var out []targetView
	for _, name := range forward.RemovedTargets(sd, counts) {
		n := counts[name]
		out = append(out, targetView{Name: name, Held: shownHeld(forward.HeldTargetRemoved),
			Pending: n.Pending, Running: n.Running, Retrying: n.Retrying, Failed: n.Failed})
	}
	return out
}

// breakerShown is a target's breaker as its badge shows it: the state,
// and while not closed since when it is open (OpenedAt), For how long.
type breakerShown struct {
	store.BreakerState
	For string // "" when closed
}

// showBreaker is b's badge at now.
func showBreaker(b store.BreakerState, now time.Time) breakerShown {
	s := breakerShown{BreakerState: b}
	if b.State != store.BreakerClosed && !b.OpenedAt.IsZero() {
		s.For = roundDuration(now.Sub(b.OpenedAt))
	}
	return s
}

// heldBy is forward.Held's words, as the console shows them: "held: …",
// "" when nothing holds the forwards.
func heldBy(b store.BreakerState, paused *store.TargetPause, now time.Time) (held, hint string) {
	held, hint = forward.Held(b, paused, now)
	if held != "" {
		held = "held: " + held
	}
	return held, hint
}

// shownHeld is held (forward's words) as the console shows them: "held:
// …", "" for "".
func shownHeld(held string) string {
	if held == "" {
		return ""
	}
	return "held: " + held
}

// heldByRate is forward.HeldByRate's words, as the console shows them.
func heldByRate(t *config.Target) (held, hint string) {
	held, hint = forward.HeldByRate(t)
	if held != "" {
		held = "held: " + held
	}
	return held, hint
}

// roundDuration shows d to the second (to the minute past an hour), at
// least "0s".
func roundDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// The deliveries of a sender.

// pageSize is how many deliveries a page of the list shows.
const pageSize = 50

type deliveriesView struct {
	Sender       string
	DeliveryID   string
	Since, Until string // as typed into the form
	EventType    string // a prefix, as typed into the form
	Records      []store.Delivery
	// Forwards are the forward states of each record's event, in words
	// ("2 delivered, 1 retrying": its newest forward to each of the
	// sender's targets); none for an event without forwards.
	Forwards              map[uuid.UUID]string
	Next                  template.URL // the next page, "" on the last
	Filtered, ExactLookup bool
}

// forwardSummaries sets v.Forwards for v.Records: one round trip for the
// page, whatever its length.
func (c *Console) forwardSummaries(r *http.Request, sd *config.Sender, v *deliveriesView) error {
	if len(v.Records) == 0 || len(sd.Forward) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(v.Records))
	for i, rec := range v.Records {
		ids[i] = rec.EventID
	}
	sums, err := c.jobs.ForwardSummaries(r.Context(), sd.Name, sd.TargetNames(), ids)
	if err != nil {
		return err
	}
	v.Forwards = make(map[uuid.UUID]string, len(sums))
	for id, s := range sums {
		v.Forwards[id] = s.String()
	}
	return nil
}

// timeLayouts are the forms the time range is accepted in: what an HTML
// datetime-local input sends (taken as UTC), and RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano, "2006-01-02"}

func parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time such as 2026-11-30T14:05 (UTC) or 2026-11-30T14:05:00Z", s)
}

func (c *Console) deliveries(w http.ResponseWriter, r *http.Request) {
	sender := param(r, "sender")
	sd, ok := c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return
	}
	q := r.URL.Query()
	v := deliveriesView{Sender: sender, DeliveryID: strings.TrimSpace(q.Get("delivery_id")), Since: q.Get("since"), Until: q.Get("until"),
		EventType: strings.TrimSpace(q.Get("event_type"))}
	bad := func(msg string) {
		c.render(w, r, http.StatusBadRequest, "deliveries", page{Title: "Deliveries of " + sender, Message: msg, Data: v})
	}
	if v.DeliveryID != "" {
		v.Filtered, v.ExactLookup = true, true
		if why := idempotency.CheckDeliveryID(v.DeliveryID); why != "" {
			v.DeliveryID = ""
			bad("Delivery ID: it " + why + ", so no delivery has it.")
			return
		}
		rec, err := c.q.GetDelivery(r.Context(), idempotency.Key{Sender: sender, DeliveryID: v.DeliveryID})
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			c.fail(w, r, err)
			return
		default:
			rec.Response.Body = nil
			v.Records = []store.Delivery{rec}
		}
		if err := c.forwardSummaries(r, sd, &v); err != nil {
			c.fail(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, "deliveries", page{Title: "Deliveries of " + sender, Data: v})
		return
	}
	since, err := parseTime(v.Since)
	if err != nil {
		bad("From: " + err.Error() + ".")
		return
	}
	until, err := parseTime(v.Until)
	if err != nil {
		bad("To: " + err.Error() + ".")
		return
	}
	if v.EventType != "" {
		if why := config.CheckEventTypeFilter(strings.TrimSuffix(v.EventType, "*") + "*"); why != "" {
			v.EventType = ""
			bad("Event type: " + why + ".")
			return
		}
	}
	v.Filtered = !since.IsZero() || !until.IsZero() || v.EventType != ""
	var after *store.Cursor
	if cs := q.Get("cursor"); cs != "" {
		cur, err := store.ParseDeliveryCursor(cs)
		if err != nil {
			bad("This page's position (cursor) is not one the console made; start again from the first page.")
			return
		}
		after = &cur
	} else if !until.IsZero() {
		after = &store.Cursor{ReceivedAt: until} // received before until
	}
	var pg store.DeliveryPage
	if v.EventType != "" {
		// A prefix, newest first; the lower time bound ends the listing.
		pg, err = c.q.ListDeliveriesByType(r.Context(), sender, strings.TrimSuffix(v.EventType, "*")+"*", pageSize, after)
		if err == nil && !since.IsZero() {
			keep := pg.Deliveries[:0]
			for _, rec := range pg.Deliveries {
				if !rec.ReceivedAt.Before(since) {
					keep = append(keep, rec)
				}
			}
			if len(keep) < len(pg.Deliveries) {
				pg.Next = nil
			}
			pg.Deliveries = keep
		}
	} else {
		pg, err = c.q.ListDeliveriesSince(r.Context(), sender, pageSize, after, since)
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v.Records = pg.Deliveries
	if err := c.forwardSummaries(r, sd, &v); err != nil {
		c.fail(w, r, err)
		return
	}
	if pg.Next != nil {
		nq := url.Values{}
		nq.Set("cursor", pg.Next.String())
		if v.Since != "" {
			nq.Set("since", v.Since)
		}
		if v.Until != "" {
			nq.Set("until", v.Until)
		}
		if v.EventType != "" {
			nq.Set("event_type", v.EventType)
		}
		v.Next = template.URL(Prefix + "/senders/" + url.PathEscape(sender) + "/deliveries?" + nq.Encode()) // escaped here
	}
	c.render(w, r, http.StatusOK, "deliveries", page{Title: "Deliveries of " + sender, Data: v})
}

// One delivery.

// maxShownBody is the most of a body the delivery page shows; the rest is
// behind the raw body link.
const maxShownBody = 64 << 10

type bodyView struct {
	Kind      string // "json", "text", "hex" or "empty"
	Text      string
	Size      int
	Truncated bool
}

type headerView struct{ Name, Value string }

type forwardView struct {
	Target, URL, State, LastError string
	// Held says why an unfinished forward waits though its attempt is due:
	// an operator paused its target, its target's breaker is not closed,
	// its target asked for a pause, or its target is not configured (""
	// otherwise).
	Held                   string
	JobID                  int64
	Attempts, MaxAttempts  int
	LastStatus             int
	CreatedAt, DeliveredAt time.Time
}

type deliveryView struct {
	Sender     string
	Rec        store.Delivery
	SHA256     string
	Response   bodyView
	HasEvent   bool
	Event      events.Event
	Headers    []headerView
	Body       bodyView
	Forwards   []forwardView
	HasTargets bool
	// Redelivered is how many forwards the Redeliver that led here
	// enqueued; -1 when the page was not reached that way. After is how
	// many of them are queued after a forward that was running or retrying.
	Redelivered, After int
}

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
	fwds, err := c.jobs.EventForwards(r.Context(), sender, rec.EventID)
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
		LastStatus: sh.LastStatus, CreatedAt: sh.CreatedAt, DeliveredAt: sh.DeliveredAt, LastError: sh.LastError, Held: shownHeld(sh.Held)}
}

// showBody shows a body: JSON pretty-printed when the content type says
// JSON and it is valid, text when it is valid UTF-8 without control
// characters other than whitespace, a hex dump otherwise; cut to
// maxShownBody.
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

// isText reports whether b is UTF-8 text (a character cut at the end of a
// truncated body allowed) without control characters but tab, CR and LF.
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

// lookupDelivery returns the configured sender named sender and its
// delivery id; when either is missing or the lookup fails, it has answered
// the request (404 or 500) and ok is false.
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

// A target's failed forwards.

// maxFailedShown is how many failed forwards the target page lists.
const maxFailedShown = 200

// failedForward is a failed forward of the target page: FailedAt is when
// it was given up.
type failedForward struct {
	queue.TargetForward
	FailedAt time.Time
}

type failedView struct {
	Sender, Target, URL string
	Breaker             breakerShown
	// Held is how many of the target's forwards wait for its breaker
	// (pending or retrying while it is not closed) or its pause, HeldBy
	// says so and HeldHint when they go.
	Held             int64
	HeldBy, HeldHint string
	// Paused is an operator's pause that holds the target's forwards; nil
	// when none does (the page offers to pause it).
	Paused  *store.TargetPause
	Failed  []failedForward
	Max     int
	Charts  []chart // forwards delivered and failed, and latency: last hour, last day
	History breakerView
}

func (c *Console) failed(w http.ResponseWriter, r *http.Request) {
	sender, target := param(r, "sender"), param(r, "target")
	sd, ok := c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return
	}
	t, ok := sd.Target(target)
	if !ok {
		c.notFound(w, r, "This sender has no target with this name.")
		return
	}
	breakers, err := c.q.Breakers(r.Context(), sender)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	b, ok := breakers[target]
	if !ok {
		b = store.BreakerState{State: store.BreakerClosed}
	}
	pauses, err := c.q.TargetPausesOf(r.Context(), sender)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// The API's failed forwards (GET …/forwards?state=failed): a forward
	// redelivered since is no longer failed.
	pg, err := c.jobs.ListTargetForwards(r.Context(), queue.Filter{Sender: sender, Target: target, State: queue.StateFailed}, maxFailedShown, nil)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// While an operator's pause holds, the breaker is not closed, or a
	// pause the target asked for has not ended, the target's unfinished
	// forwards (but those running: probes) are held by it.
	now := c.opts.Now()
	paused := forward.ActivePause(pauses, target, now)
	heldText, heldHint := heldBy(b, paused, now)
	byRate := false
	if heldText == "" {
		heldText, heldHint = heldByRate(t)
		byRate = heldText != ""
	}
	var held int64
	if heldText != "" {
		counts, err := c.jobs.CountForwards(r.Context(), sender, false)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		held = counts[target].Pending + counts[target].Retrying
	}
	if byRate && held == 0 {
		heldText, heldHint = "", "" // none waits for a turn
	}
	fs := make([]failedForward, 0, len(pg.Forwards))
	for _, f := range pg.Forwards {
		f.LastError = redact.URLInText(f.LastError, t.URL, t.SecretPath)
		fs = append(fs, failedForward{TargetForward: f, FailedAt: f.FinishedAt})
	}
	// Listed by when they failed, newest first, as the API pages them: the
	// maxFailedShown that failed last (a forward retried for hours fails
	// long after newer ones).
	_, targetCharts, err := c.senderCharts(r.Context(), sender, now)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	history, err := c.breakerHistory(r.Context(), sender, target, b, now, func(s string) string { return redact.URLInText(s, t.URL, t.SecretPath) })
	if err != nil {
		c.fail(w, r, err)
		return
	}
	msg := ""
	switch {
	case r.URL.Query().Has("paused") && paused != nil:
		msg = "Paused: the target's forwards are held in every process within about a second, until it is resumed."
	case r.URL.Query().Has("resumed") && paused == nil:
		msg = "Resumed: the held forwards are released, in the order they were accepted."
	}
	if n, err := strconv.ParseInt(r.URL.Query().Get("matched"), 10, 64); err == nil && n >= 0 {
		switch st := queue.State(r.URL.Query().Get("state")); st {
		case queue.StateRunning, queue.StateRetrying:
			msg = fmt.Sprintf("%d %s forwards get a new attempt: a new forward is queued after each current one, and is sent once that one has ended (delivered or failed).", n, st)
		default:
			msg = fmt.Sprintf("%d failed forwards are being sent again, in batches, by the worker processes.", n)
		}
	}
	c.render(w, r, http.StatusOK, "failed", page{Title: "Target " + target + " of " + sender, Notice: msg,
		Data: failedView{Sender: sender, Target: target, URL: redact.URL(t.URL, t.SecretPath), Breaker: showBreaker(b, now), Held: held, HeldBy: heldText, HeldHint: heldHint,
			Paused: paused, Failed: fs, Max: maxFailedShown,
			Charts: targetCharts[target], History: history}})
}

// bulkRedeliver redelivers every forward of a target in the form's state
// (failed, the default, or running or retrying: each of those gets a new
// forward queued after it) since the time in the form (all of them when
// empty), as POST /v1/senders/{sender}/targets/{target}/redeliver does,
// then shows the target's page, which says how many it matched.
func (c *Console) bulkRedeliver(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	sender := sd.Name
	since, err := parseTime(r.PostFormValue("since"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Redeliver", Message: "Since: " + err.Error() + "."})
		return
	}
	if c.opts.Redeliverer == nil {
		c.fail(w, r, errors.New("console: no redelivery (console.Config.Redeliverer)"))
		return
	}
	state := queue.StateFailed
	switch st := queue.State(r.PostFormValue("state")); st {
	case "", queue.StateFailed:
	case queue.StateRunning, queue.StateRetrying:
		state = st
	default:
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Redeliver", Message: "State: failed, running or retrying."})
		return
	}
	res, err := c.opts.Redeliverer.BulkRedeliver(r.Context(), queue.BulkRequest{Sender: sd, Target: target, State: state, Since: since})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	to := targetURL(sender, target) + "?matched=" + strconv.FormatInt(res.Matched, 10)
	if res.AfterCurrent {
		to += "&state=" + string(state)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// targetURL is the address of sender's target's page.
func targetURL(sender, target string) string {
	return Prefix + "/senders/" + url.PathEscape(sender) + "/targets/" + url.PathEscape(target) + "/failed"
}

// pauseTarget pauses a target for the form's reason, until the form's time
// (UTC; until resumed when empty), as POST
// /v1/senders/{sender}/targets/{target}/pause does, then shows the
// target's page, which says so.
func (c *Console) pauseTarget(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	sender := sd.Name
	until, err := parseTime(r.PostFormValue("until"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Pause", Message: "Until: " + err.Error() + "."})
		return
	}
	p := store.TargetPause{Sender: sender, Target: target, Until: until, Reason: strings.TrimSpace(r.PostFormValue("reason")),
		By: store.PausedBy("console", c.opts.Limiter.ClientOf(r))}
	if why := store.CheckPause(p.Reason, p.Until, c.opts.Now()); why != "" {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Pause", Message: "The pause's " + why + "."})
		return
	}
	if p, err = c.q.PauseTarget(r.Context(), p); err != nil {
		c.fail(w, r, err)
		return
	}
	if c.opts.Pauses != nil {
		c.opts.Pauses.Poke()
	}
	c.log.Info("target paused by an operator", "sender", sender, "target", target, "until", p.Until, "reason", p.Reason, "by", p.By)
	http.Redirect(w, r, targetURL(sender, target)+"?paused=1", http.StatusSeeOther)
}

// resumeTarget ends a target's pause, as POST
// /v1/senders/{sender}/targets/{target}/resume does, then shows the
// target's page, which says so.
func (c *Console) resumeTarget(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	sender := sd.Name
	p, was, err := c.q.ResumeTarget(r.Context(), sender, target)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if c.opts.Pauses != nil {
		c.opts.Pauses.Poke()
	}
	if was {
		c.log.Info("target resumed by an operator", "sender", sender, "target", target, "paused_since", p.Since, "reason", p.Reason,
			"by", store.PausedBy("console", c.opts.Limiter.ClientOf(r)))
	}
	http.Redirect(w, r, targetURL(sender, target)+"?resumed=1", http.StatusSeeOther)
}

// formTarget returns the configured sender and the name of its target a
// target's form was posted for; when either is missing it has answered
// 404 and ok is false.
func (c *Console) formTarget(w http.ResponseWriter, r *http.Request) (sd *config.Sender, target string, ok bool) {
	sender, target := param(r, "sender"), param(r, "target")
	sd, ok = c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return nil, "", false
	}
	if _, ok := sd.Target(target); !ok {
		c.notFound(w, r, "This sender has no target with this name.")
		return nil, "", false
	}
	return sd, target, true
}

// searchHit is a delivery the search box found, and how.
type searchHit struct {
	Sender, DeliveryID string
	By                 string // "delivery ID" or "event ID"
}

// searchView is the search page's data.
type searchView struct {
	Query string
	Hits  []searchHit
}

// search is the search box: q is a delivery ID (of any configured sender)
// or an event ID. One delivery found goes to its page (303); several are
// listed; none is a 404 page saying so. What ingest would refuse as a
// delivery ID, and what is not a UUID, is never sent to the database.
func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	view := searchView{Query: q}
	if q == "" {
		c.render(w, r, http.StatusOK, "search", page{Title: "Find a delivery", Notice: "Type a delivery ID (of any sender) or an event ID.", Data: view})
		return
	}
	if id, err := uuid.Parse(q); err == nil && len(q) == 36 {
		e, err := c.q.GetEvent(ctx, id)
		switch {
		case err == nil:
			view.Hits = append(view.Hits, searchHit{Sender: e.Sender, DeliveryID: e.DeliveryID, By: "event ID"})
		case !errors.Is(err, store.ErrNotFound):
			c.fail(w, r, err)
			return
		}
	}
	if idempotency.CheckDeliveryID(q) == "" {
		cfg := c.config()
		senders := make([]string, len(cfg.Senders))
		for i := range cfg.Senders {
			senders[i] = cfg.Senders[i].Name
		}
		found, err := c.q.FindDelivery(ctx, senders, q)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		for _, s := range found {
			if !slices.Contains(view.Hits, searchHit{Sender: s, DeliveryID: q, By: "event ID"}) {
				view.Hits = append(view.Hits, searchHit{Sender: s, DeliveryID: q, By: "delivery ID"})
			}
		}
	}
	switch len(view.Hits) {
	case 0:
		c.render(w, r, http.StatusNotFound, "search", page{Title: "Find a delivery",
			Message: "No stored delivery has this delivery ID or event ID (its key may have expired).", Data: view})
	case 1:
		http.Redirect(w, r, deliveryURL(view.Hits[0].Sender, view.Hits[0].DeliveryID, ""), http.StatusSeeOther)
	default:
		c.render(w, r, http.StatusOK, "search", page{Title: "Find a delivery", Notice: fmt.Sprintf("%d deliveries match.", len(view.Hits)), Data: view})
	}
}
