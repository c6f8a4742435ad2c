package handler

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
)

// The operator API: /v1, behind a bearer token (HOOKGATE_ADMIN_TOKEN).

// Parameters of GET /v1/senders/{sender}/deliveries.
const (
	defaultListLimit = 50
	maxListLimit     = store.MaxListLimit
)

// operatorPrefix is the path prefix of the operator API.
const operatorPrefix = "/v1"

// isOperatorPath reports whether path is the operator API's: /v1 or below.
// It is given the decoded path, so every request the router could route to
// an operator endpoint (it routes on the raw path when there is one, whose
// decoding keeps a literal /v1/ prefix) is covered.
func isOperatorPath(path string) bool {
	return path == operatorPrefix || strings.HasPrefix(path, operatorPrefix+"/")
}

// requireToken guards every request under /v1, whether or not a route
// matches it, before anything else looks at it: 403 when no admin token is
// configured, 401 with WWW-Authenticate when the bearer token is missing or
// wrong, or 429 with Retry-After instead when the client has sent too many
// missing or wrong tokens lately (authlimit.Limiter; a right token always
// passes), 403 scope-missing when a read token asks for anything but GET
// or HEAD, 400 when the path has a control character or invalid UTF-8.
// Tokens are compared as SHA-256 digests in constant time
// (access.Tokens.Check), so neither the content nor the length of a
// configured token leaks through timing. The checked token's name and
// scope go into the request's context (access.With) and its log line.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isOperatorPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if !s.callers.HasAdmin() {
			s.fail(w, r, newProblem(probOperatorDisabled,
				"The operator API is disabled because no admin token is configured. Set HOOKGATE_ADMIN_TOKEN (or --admin-token) to a long random secret and restart hookgate to enable it."))
			return
		}
		// The token is looked at first: a request with a right one is
		// never refused because of failures, its client's or others'.
		token, ok := bearerToken(r.Header)
		caller, known := s.callers.Check(token)
		if !ok || !known {
			if wait := s.authLimit.Blocked(r); wait > 0 {
				s.fail(w, r, newProblem(probTooManyAttempts, fmt.Sprintf(
					"Too many requests with a missing or wrong bearer token came from this address. Retry after the time in Retry-After (about %.1fs).", wait.Seconds())))
				return
			}
			s.authLimit.Failed(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hookgate"`)
				s.fail(w, r, newProblem(probUnauthorized,
					"The operator API needs a bearer token: send Authorization: Bearer <token> with the value of HOOKGATE_ADMIN_TOKEN or of a read token."))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="hookgate", error="invalid_token"`)
			s.fail(w, r, newProblem(probUnauthorized,
				"The bearer token is wrong. Send Authorization: Bearer <token> with the value of HOOKGATE_ADMIN_TOKEN or of a read token."))
			return
		}
		requestInfo(r.Context()).caller = caller.Name
		r = r.WithContext(access.With(r.Context(), caller))
		need := NeededScope(r.Method)
		if need == access.Admin {
			var record func()
			w, record = s.audited(w, r, caller)
			defer record()
		}
		if !caller.Scope.Allows(need) {
			s.fail(w, r, scopeMissing(caller, need))
			return
		}
		if reason := invalidPath(r.URL.Path); reason != "" {
			s.fail(w, r, newProblem(probInvalidParameter, "The request path "+reason+"; no resource of the operator API has such a name."))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// NeededScope is the scope a request of method needs under /v1: read for
// GET and HEAD, admin for any other method, which may change something.
func NeededScope(method string) access.Scope {
	if method == http.MethodGet || method == http.MethodHead {
		return access.Read
	}
	return access.Admin
}

// scopeMissing is the 403 of a token of c that lacks scope need.
func scopeMissing(c access.Caller, need access.Scope) *problemError {
	return newProblem(probScopeMissing, fmt.Sprintf(
		"This request needs a token with scope %q: token %q has scope %q only, which reads everything and changes nothing. Use the admin token for it.",
		need, c.Name, c.Scope))
}

// invalidPath returns why the decoded operator path cannot name a resource
// (a NUL or another control character, invalid UTF-8), or "". Such a path
// is refused before any query, which PostgreSQL would fail on.
func invalidPath(path string) string {
	if !utf8.ValidString(path) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(path); i++ {
		if path[i] < 0x20 || path[i] == 0x7f {
			return fmt.Sprintf("has a control character (byte 0x%02x) at position %d", path[i], i)
		}
	}
	return ""
}

// bearerToken returns the token of an Authorization: Bearer header (the
// scheme is case-insensitive), or false when there is none, there are
// several, or the token is empty.
func bearerToken(h http.Header) (string, bool) {
	vals := h.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// fail answers err as a problem and records it for the request's log line
// (which carries the cause of a 5xx).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	requestInfo(r.Context()).err = writeProblem(w, err)
}

// dbProblem is the problem of a failed database read or write of the
// operator API: 503 for a transient failure (dedup.Transient) or a Server
// without a database or redelivery, 500 for any other error.
func dbProblem(err error) *problemError {
	if errors.Is(err, errNoDB) || errors.Is(err, errNoRedeliverer) || dedup.Transient(err) {
		return &problemError{typ: probUnavailable, detail: "The database could not be read or written. Retry later.", cause: err}
	}
	return &problemError{typ: probInternal, detail: "An unexpected error occurred.", cause: err}
}

// errNoDB and errNoRedeliverer are the causes (logged, never sent) of a
// 503 from a Server built without Config.Queries or Config.Redeliverer.
var (
	errNoDB          = errors.New("operator API: no database (handler.Config.Queries)")
	errNoRedeliverer = errors.New("operator API: no redelivery (handler.Config.Redeliverer)")
)

// invalidParameter turns a parameter-binding error of the generated router
// into a 400 problem that names the parameter and what it must be, quoting
// (a bounded prefix of) the value given.
func invalidParameter(r *http.Request, err error) *problemError {
	var (
		name   string
		format *api.InvalidParamFormatError
		many   *api.TooManyValuesForParamError
	)
	switch {
	case errors.As(err, &format):
		name = format.ParamName
	case errors.As(err, &many):
		name = many.ParamName
	}
	var detail string
	switch name {
	case "event_id":
		detail = fmt.Sprintf("Path parameter event_id must be a UUID such as 01a228ca-2a14-7c1e-9a3b-5d2f8e6a4c10; got %s.", quote(chi.URLParam(r, "event_id")))
	case "limit":
		detail = limitDetail(r.URL.Query()["limit"])
	case "":
		detail = "A request parameter is invalid. See /docs for the API."
	default:
		detail = fmt.Sprintf("Parameter %s is invalid. See /docs for the API.", name)
	}
	return &problemError{typ: probInvalidParameter, detail: detail, cause: err}
}

// pageLimit returns the page size a list request asks for in given
// (defaultListLimit when it asks for none), or the problem of a limit
// outside 1..maxListLimit.
func pageLimit(r *http.Request, given *int) (int, error) {
	if given == nil {
		return defaultListLimit, nil
	}
	if *given < 1 || *given > maxListLimit {
		return 0, newProblem(probInvalidParameter, limitDetail(r.URL.Query()["limit"]))
	}
	return *given, nil
}

// badCursor is the problem of a list request whose cursor did not come
// from this API.
func badCursor(err error) error {
	return &problemError{typ: probInvalidParameter, cause: err,
		detail: "Query parameter cursor is not a cursor this API returned; pass the next_cursor of the previous page, or leave it out for the first page."}
}

func limitDetail(given []string) string {
	if len(given) != 1 {
		return fmt.Sprintf("Query parameter limit must be given at most once, as a whole number from 1 to %d.", maxListLimit)
	}
	return fmt.Sprintf("Query parameter limit must be a whole number from 1 to %d; got %s.", maxListLimit, quote(given[0]))
}

// quote returns v in double quotes, cut to 64 bytes.
func quote(v string) string {
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return fmt.Sprintf("%q", v)
}

// ListSenders answers the configured senders, in configuration order,
// without any secret: only how many signing secrets a sender has, whether
// its targets sign, and the names of their extra headers.
func (s *Server) ListSenders(w http.ResponseWriter, r *http.Request) {
	cfg := s.snapshot().Config()
	out := api.SenderList{Items: make([]api.SenderInfo, 0, len(cfg.Senders))}
	for i := range cfg.Senders {
		out.Items = append(out.Items, senderInfo(&cfg.Senders[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

func senderInfo(sd *config.Sender) api.SenderInfo {
	info := api.SenderInfo{
		Name:             sd.Name,
		Preset:           api.SenderInfoPreset(sd.Preset),
		RetentionSeconds: time.Duration(sd.Retention).Seconds(),
		MaxBodyBytes:     sd.MaxBodyBytes,
		Forward:          make([]api.TargetInfo, 0, len(sd.Forward)),
	}
	if h := sd.DeliveryID.Header; h != "" {
		info.DeliveryId.Header = &h
	}
	if p := sd.DeliveryID.JSONPointer; p != "" {
		info.DeliveryId.JsonPointer = &p
	}
	if sd.DeliveryID.BodySHA256 {
		yes := true
		info.DeliveryId.BodySha256 = &yes
	}
	scheme := sd.SignatureScheme()
	info.Signature = api.SignatureInfo{
		Scheme:           api.SignatureInfoScheme(scheme),
		SecretCount:      secretCount(sd),
		ToleranceSeconds: time.Duration(sd.Tolerance).Seconds(),
	}
	if scheme == config.SchemeHMAC {
		sig := sd.Signature
		enc := api.SignatureInfoEncoding(sig.Encoding)
		if enc == "" {
			enc = "hex"
		}
		info.Signature.Header, info.Signature.Encoding = &sig.Header, &enc
		if sig.Prefix != "" {
			info.Signature.Prefix = &sig.Prefix
		}
	}
	for _, t := range sd.Forward {
		names := make([]string, 0, len(t.Headers))
		for k := range t.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		info.Forward = append(info.Forward, api.TargetInfo{
			Name:           t.Name,
			Url:            redact.URL(t.URL, t.SecretPath),
			TimeoutSeconds: time.Duration(t.Timeout).Seconds(),
			MaxAttempts:    t.MaxAttempts,
			Signed:         t.SigningKey != nil,
			HeaderNames:    names,
		})
	}
	return info
}

// secretCount returns how many signing secrets sd lists, in any of the
// fields config accepts them in.
func secretCount(sd *config.Sender) int {
	n := len(sd.Secrets)
	if sd.Secret != "" {
		n++
	}
	if sd.Signature.Secret != "" {
		n++
	}
	return n
}

// ListDeliveries answers a page of sender's deliveries, newest first, only
// those of an event type (exact, or a prefix ending in "*") when
// event_type is given: 404 for an unknown sender, 400 for a limit outside
// 1..500, a cursor this API did not return, or an event_type that is not
// an event type or prefix.
func (s *Server) ListDeliveries(w http.ResponseWriter, r *http.Request, sender api.Sender, params api.ListDeliveriesParams) {
	if _, ok := s.snapshot().Config().Sender(sender); !ok {
		s.fail(w, r, unknownSender(sender))
		return
	}
	limit, err := pageLimit(r, params.Limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var after *store.Cursor
	if params.Cursor != nil {
		c, err := store.ParseDeliveryCursor(*params.Cursor)
		if err != nil {
			s.fail(w, r, badCursor(err))
			return
		}
		after = &c
	}
	var eventType string
	if params.EventType != nil {
		eventType = *params.EventType
		if why := config.CheckEventTypeFilter(eventType); why != "" {
			s.fail(w, r, newProblem(probInvalidParameter, "Query parameter event_type "+why+"."))
			return
		}
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	page, err := s.q.ListDeliveriesByType(r.Context(), sender, eventType, limit, after)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	out := api.DeliveryPage{Items: make([]api.DeliverySummary, 0, len(page.Deliveries))}
	for _, rec := range page.Deliveries {
		out.Items = append(out.Items, api.DeliverySummary{
			DeliveryId:     rec.DeliveryID,
			EventId:        rec.EventID,
			EventType:      rec.EventType,
			ReceivedAt:     rec.ReceivedAt.UTC(),
			ExpiresAt:      rec.ExpiresAt.UTC(),
			RequestSha256:  hex.EncodeToString(rec.RequestSHA256[:]),
			ResponseStatus: rec.Response.Status,
		})
	}
	if page.Next != nil {
		c := page.Next.String()
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
}

// GetDelivery answers one delivery of sender with its stored response and
// the state of each of its forwards, and what holds those that wait: 404
// for an unknown sender or delivery.
func (s *Server) GetDelivery(w http.ResponseWriter, r *http.Request, sender api.Sender, deliveryID string) {
	sd, ok := s.snapshot().Config().Sender(sender)
	if !ok {
		s.fail(w, r, unknownSender(sender))
		return
	}
	if reason := idempotency.CheckDeliveryID(deliveryID); reason != "" {
		s.fail(w, r, newProblem(probInvalidParameter, "Path parameter delivery_id "+reason+"; no delivery can have such an ID."))
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	rec, err := s.q.GetDelivery(r.Context(), idempotency.Key{Sender: sender, DeliveryID: deliveryID})
	if errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, &problemError{typ: probNotFound, cause: err,
			detail: fmt.Sprintf("Sender %q has no delivery %s (never received, or its key has expired).", sender, quote(deliveryID))})
		return
	}
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	fwds, err := s.jobs.EventForwards(r.Context(), sender, rec.EventID)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	var h holds
	if len(fwds) > 0 {
		if h, err = s.readHolds(r.Context(), sender); err != nil {
			s.fail(w, r, dbProblem(err))
			return
		}
	}
	out := api.Delivery{
		Sender:        sender,
		DeliveryId:    rec.DeliveryID,
		EventId:       rec.EventID,
		EventType:     rec.EventType,
		ReceivedAt:    rec.ReceivedAt.UTC(),
		ExpiresAt:     rec.ExpiresAt.UTC(),
		RequestSha256: hex.EncodeToString(rec.RequestSHA256[:]),
		Response: api.StoredResponse{
			Status:      rec.Response.Status,
			ContentType: rec.Response.ContentType,
		},
		Forwards:   make([]api.ForwardState, 0, len(fwds)),
		RuleErrors: ruleErrors(rec.RuleErrors),
	}
	out.Response.BodyEncoding, out.Response.Body = showBody(rec.Response.ContentType, rec.Response.Body)
	for _, f := range fwds {
		fs := forwardState(sd, f)
		if fs.Held == nil { // a removed target's (forward.Show) comes first
			fs.Held = h.of(fs.Target, f.State)
		}
		out.Forwards = append(out.Forwards, fs)
	}
	writeJSON(w, http.StatusOK, out)
}

// forwardState shows f, a forward of an event of sender (nil when sender is
// no longer configured).
func forwardState(sender *config.Sender, f queue.Forward) api.ForwardState {
	sh := forward.Show(sender, f)
	fs := api.ForwardState{
		Target:      sh.Target,
		Url:         sh.URL,
		State:       api.ForwardStateState(sh.State),
		Attempts:    sh.Attempts,
		MaxAttempts: sh.MaxAttempts,
		CreatedAt:   sh.CreatedAt.UTC(),
	}
	if sh.JobID != 0 {
		fs.JobId = &sh.JobID
	}
	if sh.LastStatus != 0 {
		fs.LastStatus = &sh.LastStatus
	}
	if sh.LastError != "" {
		fs.LastError = &sh.LastError
	}
	if !sh.DeliveredAt.IsZero() {
		t := sh.DeliveredAt.UTC()
		fs.DeliveredAt = &t
	}
	fs.Ack = nullable(sh.Ack)
	if sh.Held != "" {
		fs.Held = &sh.Held
	}
	return fs
}

// GetEvent answers a stored event with its headers and body: 404 when no
// such event is stored.
func (s *Server) GetEvent(w http.ResponseWriter, r *http.Request, eventID api.EventID) {
	e, err := s.event(r.Context(), eventID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := api.Event{
		EventId:    e.ID,
		Sender:     e.Sender,
		DeliveryId: e.DeliveryID,
		EventType:  e.EventType,
		ReceivedAt: e.ReceivedAt.UTC(),
		Headers:    e.Headers,
		RuleErrors: ruleErrors(e.RuleErrors),
	}
	out.BodyEncoding, out.Body = showBody(e.Headers.Get("Content-Type"), e.Body)
	writeJSON(w, http.StatusOK, out)
}

// ruleErrors returns errs as the API shows them ([] for none).
func ruleErrors(errs []events.RuleError) []api.RuleError {
	out := make([]api.RuleError, 0, len(errs))
	for _, e := range errs {
		out = append(out, api.RuleError{Target: e.Target, Rule: api.RuleErrorRule(e.Rule), Error: e.Error})
	}
	return out
}

// event reads an event, as a problem when that fails.
func (s *Server) event(ctx context.Context, id uuid.UUID) (events.Event, error) {
	if s.q == nil {
		return events.Event{}, dbProblem(errNoDB)
	}
	e, err := s.q.GetEvent(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return events.Event{}, &problemError{typ: probNotFound, cause: err, detail: fmt.Sprintf("No event %s is stored.", id)}
	}
	if err != nil {
		return events.Event{}, dbProblem(err)
	}
	return e, nil
}

// GetEventAttempts answers the kept attempts of an event's forwards,
// newest first: 404 when no such event is stored.
func (s *Server) GetEventAttempts(w http.ResponseWriter, r *http.Request, eventID api.EventID) {
	e, err := s.event(r.Context(), eventID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	as, err := s.q.EventAttempts(r.Context(), e.Sender, e.ID)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	out := api.EventAttempts{EventId: e.ID, Sender: e.Sender, Attempts: make([]api.Attempt, 0, len(as))}
	for _, a := range as {
		out.Attempts = append(out.Attempts, showAttempt(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// showAttempt shows an attempt. Its headers were redacted when recorded.
// Its body is text when it is UTF-8, base64 otherwise.
func showAttempt(a store.Attempt) api.Attempt {
	v := api.Attempt{Target: a.Target, StartedAt: a.StartedAt.UTC(), DurationMs: float64(a.Took.Microseconds()) / 1000,
		Outcome: api.AttemptOutcome(a.Outcome), Cause: api.AttemptCause(a.Cause), CauseText: a.CauseText(), Attempt: a.Attempt,
		Actor: nullable(a.Actor), Ack: nullable(a.Ack), Error: nullable(a.Error), Headers: a.Header,
		BodyEncoding: api.AttemptBodyEncodingText, Body: string(a.Body)}
	if v.Headers == nil {
		v.Headers = map[string][]string{}
	}
	if a.JobID != 0 {
		v.JobId = &a.JobID
	}
	if a.Status != 0 {
		v.Status = &a.Status
	}
	if !utf8.Valid(a.Body) {
		v.BodyEncoding, v.Body = api.AttemptBodyEncodingBase64, base64.StdEncoding.EncodeToString(a.Body)
	}
	return v
}

// nullable is s, or nil when s is "".
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RedeliverEvent enqueues one new forward of the event per target its
// sender has now (none for a target whose forward of it is still pending)
// and answers 202 with the jobs: 404 when no such event
// is stored, 409 when its sender has no targets or is no longer configured.
func (s *Server) RedeliverEvent(w http.ResponseWriter, r *http.Request, eventID api.EventID) {
	e, err := s.event(r.Context(), eventID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info := requestInfo(r.Context())
	info.sender, info.deliveryID = e.Sender, e.DeliveryID
	sender, ok := s.snapshot().Config().Sender(e.Sender)
	if !ok {
		s.fail(w, r, newProblem(probNoTargets, fmt.Sprintf("Sender %q of this event is no longer configured, so it has no forward targets to redeliver to.", e.Sender)))
		return
	}
	if len(sender.Forward) == 0 {
		s.fail(w, r, newProblem(probNoTargets, fmt.Sprintf("Sender %q has no forward targets configured, so there is nothing to redeliver to. Add a forward target to it in hookgate.yaml first.", e.Sender)))
		return
	}
	if s.redeliver == nil {
		s.fail(w, r, dbProblem(errNoRedeliverer))
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	jobs, err := s.redeliver.Redeliver(r.Context(), sender, e.ID, e.DeliveryID)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	info.audit = map[string]any{"forwards": len(jobs)}
	out := api.Redelivery{EventId: e.ID, Sender: e.Sender, DeliveryId: e.DeliveryID, Forwards: make([]api.EnqueuedForward, 0, len(jobs))}
	for _, j := range jobs {
		f := api.EnqueuedForward{JobId: j.JobID, Target: j.Target, Url: forward.Show(sender, queue.Forward{Target: j.Target, JobID: j.JobID}).URL,
			AlreadyPending: j.AlreadyPending, AfterCurrent: j.AfterCurrent}
		if j.CurrentJobID != 0 {
			f.CurrentJobId = &j.CurrentJobID
		}
		if j.OrderKey != "" {
			f.OrderKey, f.InPlace, f.QueuedBehind = &j.OrderKey, &j.InPlace, &j.QueuedBehind
		}
		out.Forwards = append(out.Forwards, f)
	}
	writeJSON(w, http.StatusAccepted, out)
}

func unknownSender(name string) *problemError {
	return newProblem(probUnknownSender, fmt.Sprintf("No sender named %s is configured.", quote(name)))
}

// showBody returns how a body is shown and the value shown: the body itself
// as JSON when contentType mentions json and the body is valid JSON (an
// empty body is not), otherwise its bytes in standard base64.
func showBody(contentType string, body []byte) (api.BodyEncoding, *api.Body) {
	var v api.Body
	if strings.Contains(strings.ToLower(contentType), "json") && json.Valid(body) {
		v = json.RawMessage(body)
		return "json", &v
	}
	v = base64.StdEncoding.EncodeToString(body)
	return "base64", &v
}
