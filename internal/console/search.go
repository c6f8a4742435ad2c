package console

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/store"
)

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

// search finds deliveries by delivery ID, of any configured sender, or by
// event ID. One hit redirects to its page, several are listed, and none is
// a 404. A delivery ID that ingest would refuse, or an event ID that is
// not a UUID, never reaches the database.
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
