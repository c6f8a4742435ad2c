package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// manySendersYAML configures n senders, s01, s02, …, the third with a
// forward target.
func manySendersYAML(n int) string {
	var b strings.Builder
	b.WriteString("senders:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - name: s%02d\n    preset: generic\n    delivery_id: { header: X-Delivery-Id }\n", i)
		if i == 3 {
			b.WriteString("    forward:\n      - name: app\n        url: http://127.0.0.1:9/hooks\n")
		}
	}
	return b.String()
}

var (
	overviewSender = regexp.MustCompile(`<section class="sender" id="sender-[^"]+">\s*<h2><a href="/console/senders/([^/"]+)/deliveries">`)
	pageNext       = regexp.MustCompile(`<a rel="next" href="([^"]+)">`)
	pagePrev       = regexp.MustCompile(`<a rel="prev" href="([^"]+)">`)
)

// TestOverviewPagesItsSenders: with more senders than one page holds, the
// overview shows them ten a page, in the configuration's order; following
// its "next" links from the first page shows every sender once; a page
// past the last is 404 and a page that is not a number 400, each saying
// why and linking to a page that exists; its form's sender name goes to
// the page and section of that sender, and an unknown name is 404. A
// configuration that fits one page has no page links.
func TestOverviewPagesItsSenders(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, manySendersYAML(23), newOptions(), workOpts{})
	c := e.client()
	e.signIn(c)

	var seen []string
	var pages []page
	for path, n := "/console/", 0; path != ""; n++ {
		if n > 5 {
			t.Fatalf("more than 5 pages of 23 senders: at %s", path)
		}
		p := e.do(c, http.MethodGet, path, nil, nil)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, p.status, p.body)
		}
		pages = append(pages, p)
		for _, m := range overviewSender.FindAllStringSubmatch(p.body, -1) {
			seen = append(seen, m[1])
		}
		path = ""
		if m := pageNext.FindStringSubmatch(p.body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	var want []string
	for i := 1; i <= 23; i++ {
		want = append(want, fmt.Sprintf("s%02d", i))
	}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("the senders, following the next links: %v; want each once, in order: %v", seen, want)
	}
	if len(pages) != 3 {
		t.Fatalf("%d pages; want 3 of 10, 10 and 3 senders", len(pages))
	}
	for i, w := range []string{"Senders 1–10 of 23", "Senders 11–20 of 23", "Senders 21–23 of 23"} {
		if !strings.Contains(pages[i].body, w) {
			t.Errorf("page %d does not say %q", i+1, w)
		}
	}
	if pagePrev.MatchString(pages[0].body) || !strings.Contains(pages[0].body, `href="/console/?page=3">Last page (3)`) {
		t.Errorf("the first page: want no previous link and a link to the last page (3)")
	}
	if m := pagePrev.FindStringSubmatch(pages[2].body); m == nil || m[1] != "/console/?page=2" {
		t.Errorf("the last page's previous link: %v; want /console/?page=2", m)
	}
	// The third sender's target is on the first page, with its counts.
	if !strings.Contains(pages[0].body, `href="/console/senders/s03/targets/app/failed"`) {
		t.Errorf("the first page lacks s03's target app")
	}

	p := e.do(c, http.MethodGet, "/console/?page=4", nil, nil)
	if p.status != http.StatusNotFound || !strings.Contains(p.body, "There is no page 4: 23 senders make 3 pages of 10.") ||
		!strings.Contains(p.body, `href="/console/?page=3">Last page (3)`) || overviewSender.MatchString(p.body) {
		t.Errorf("a page past the last: %d %.600s; want 404 saying why, with a link to page 3 and no sender", p.status, p.body)
	}
	if strings.Contains(p.body, "No senders are configured") {
		t.Errorf("a page past the last says that no senders are configured")
	}
	for _, q := range []string{"0", "-1", "two", "1.5"} {
		p := e.do(c, http.MethodGet, "/console/?page="+q, nil, nil)
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, "Page: a whole number from 1.") ||
			!strings.Contains(p.body, `href="/console/">First page`) || overviewSender.MatchString(p.body) {
			t.Errorf("page %q: %d %.600s; want 400 saying why, with a link to the first page", q, p.status, p.body)
		}
	}

	// The form on the pages: a sender's name goes to its page, at its
	// section; an unknown name is 404.
	if !strings.Contains(pages[0].body, `name="sender"`) {
		t.Errorf("the first page has no form to go to a sender")
	}
	for name, want := range map[string]string{"s17": "/console/?page=2#sender-s17", "s01": "/console/#sender-s01", " s23 ": "/console/?page=3#sender-s23"} {
		p := e.do(c, http.MethodGet, "/console/?sender="+url.QueryEscape(name), nil, nil)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != want {
			t.Errorf("sender %q: %d to %q; want 303 to %s", name, p.status, p.header.Get("Location"), want)
		}
	}
	if !strings.Contains(pages[1].body, `<section class="sender" id="sender-s17">`) {
		t.Errorf("page 2 has no section with the anchor sender-s17")
	}
	p = e.do(c, http.MethodGet, "/console/?sender=nobody", nil, nil)
	if p.status != http.StatusNotFound || !strings.Contains(p.body, "No sender is named &#34;nobody&#34;.") || overviewSender.MatchString(p.body) {
		t.Errorf("an unknown sender: %d %.600s; want 404 naming it", p.status, p.body)
	}

	// Two senders fit one page: no page links.
	small := newEnv(t, newOptions())
	sc := small.client()
	small.signIn(sc)
	p = small.do(sc, http.MethodGet, "/console/", nil, nil)
	if p.status != http.StatusOK || strings.Contains(p.body, `class="pages"`) || len(overviewSender.FindAllString(p.body, -1)) != 2 {
		t.Errorf("the overview of two senders: %d, want both senders and no page links", p.status)
	}
}
