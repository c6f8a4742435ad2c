package console

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/store"
)

// pageSize is how many deliveries a page of the list shows.
const pageSize = 50

// deliveriesView is the deliveries page's data.
type deliveriesView struct {
	Sender       string
	DeliveryID   string
	Since, Until string // as typed into the form
	EventType    string // a prefix, as typed into the form
	Records      []store.Delivery
	// Forwards sums up each record's forwards in words, such as "2
	// delivered, 1 retrying". The newest forward to each target counts.
	Forwards              map[uuid.UUID]string
	Next                  template.URL // the next page, "" on the last
	Filtered, ExactLookup bool
}

// forwardSummaries sets v.Forwards for v.Records in one round trip.
func (c *Console) forwardSummaries(r *http.Request, sd *config.Sender, v *deliveriesView) error {
	if len(v.Records) == 0 || len(sd.Forward) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(v.Records))
	for i, rec := range v.Records {
		ids[i] = rec.EventID
	}
	sums, err := c.forwards.ForwardSummaries(r.Context(), sd.Name, sd.TargetNames(), ids)
	if err != nil {
		return err
	}
	v.Forwards = make(map[uuid.UUID]string, len(sums))
	for id, s := range sums {
		v.Forwards[id] = s.String()
	}
	return nil
}

// deliveries lists a sender's deliveries, newest first. The form finds one
// by delivery ID, or filters by time range and event type prefix.
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
