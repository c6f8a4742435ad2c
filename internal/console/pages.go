package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/store"
)

// page is what every template gets: the layout's fields and the page's
// own data.
type page struct {
	Title    string
	SignedIn bool
	// CanChange is set for a session that may change things (the admin
	// token's): a read session's pages have no forms that change.
	CanChange bool
	// Who is the name of the session's token.
	Who     string
	CSRF    string
	Message string // an error shown at the top (role alert)
	Notice  string // information shown at the top (role status)
	Data    any
}

// funcs are the functions the templates call.
var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"path": url.PathEscape,
	// delivery is the address of a delivery's page.
	"delivery": deliveryURL,
	"add":      func(a, b float64) float64 { return a + b },
	// kind is how a chart names a kind of count.
	"kind": kindLabel,
	// actions are the audit trail's actions, for its filter.
	"actions": func() []string {
		return []string{store.ActionSignIn, store.ActionSignOut, store.ActionSignOutAll, store.ActionRedeliver, store.ActionRedeliverBulk, store.ActionSkip,
			store.ActionPause, store.ActionResume, store.ActionReload, store.ActionOther}
	},
	// event is an event ID as shown, "" for none.
	"event": func(id uuid.UUID) string {
		if id == uuid.Nil {
			return ""
		}
		return id.String()
	},
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
		p.SignedIn, p.CSRF, p.CanChange, p.Who = true, c.csrf(s), s.canChange(), s.caller.Name
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

func (c *Console) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	c.render(w, r, http.StatusForbidden, "error", page{Title: "Forbidden", Message: msg})
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
