package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The screenshots make screenshots writes into docs/ must not change when
// the pages do not: a fresh clone's make screenshots leaves the tree clean.
// Three things see to it. The tests that take them run the server on a
// fixed clock (shotClock: shotClockEpoch plus the time since the test
// began) for everything it times itself (deliveries received, the charts'
// counts and their time axes, the breakers), so that the charts' axes and
// bars are drawn the same whenever the test runs. Before a shot,
// steadyText rewrites what still differs from run to run in the page's
// text (times the database or River stamped, fractions of seconds, event
// IDs, the test target's port, the worker process's name) to fixed values,
// so that a fresh run, here or on another machine, draws the same text in
// the same places; and writeScreenshot leaves the committed image alone
// unless the new one looks different (sameLook): what neither can fix
// (measured latencies, counts of attempts) changes a few pixels, not a
// page.

// shotEpoch is where steadyText moves the time the test began: a time the
// page shows becomes shotEpoch plus its whole seconds since then, so that
// the distances that matter (a key that expires 7 days after it was
// received) stay, and those under a second (how long the test took to
// get there) go.
var shotEpoch = time.Date(2026, 11, 29, 19, 36, 39, 0, time.UTC)

// shotClockEpoch is where shotClock starts: a few seconds into a minute,
// so that a test reaches its shots within the same minute (the charts'
// current bucket) however slow the machine is (within 50 s).
var shotClockEpoch = time.Date(2026, 11, 29, 19, 36, 9, 0, time.UTC)

// shotClock returns a clock that reads shotClockEpoch now and runs on
// with the real one: the server's clock in the tests that take the
// screenshots (console.Config.Now, which newEnvWith gives the whole
// server).
func shotClock() func() time.Time {
	began := time.Now()
	return func() time.Time { return shotClockEpoch.Add(time.Since(began)) }
}

// shotFraction is the fraction of a second of every time steadyText writes,
// cut to as many digits as the page's time has.
const shotFraction = "460815"

// shotEventID replaces every UUID the page shows.
const shotEventID = "01a228cf-3b24-7c83-9e90-cdd66669eb21"

// steadyTextJS rewrites the text nodes of the page (see steadyText). Times
// are "2006-01-02 15:04:05.000" (the console's) or RFC 3339 (a stored
// body's), with or without a fraction; each keeps its form and width.
const steadyTextJS = `((anchors, epoch, fraction, id, literal) => {
  const ts = /(\d{4}-\d\d-\d\d)([ T])(\d\d:\d\d:\d\d)(\.\d+)?/g;
  const uuid = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
  const moved = (m, date, sep, clock, frac) => {
    const t = Date.parse(date + 'T' + clock + (frac ? frac.slice(0, 4) : '') + 'Z');
    if (isNaN(t)) return m;
    // The anchor of t's clock: the nearest (the real clock's start, the fixed clock's).
    const began = anchors.reduce((a, b) => Math.abs(t - b) < Math.abs(t - a) ? b : a);
    const s = new Date(epoch + Math.floor((t - began) / 1000) * 1000).toISOString(); // 2026-11-29T19:36:39.000Z
    return s.slice(0, 10) + sep + s.slice(11, 19) + (frac ? '.' + fraction.padEnd(frac.length - 1, '0').slice(0, frac.length - 1) : '');
  };
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = walk.nextNode()); ) {
    let s = n.nodeValue;
    for (const [from, to] of literal) s = s.split(from).join(to);
    s = s.replace(ts, moved).replace(uuid, id);
    if (s !== n.nodeValue) n.nodeValue = s;
  }
  return true;
})`

// steadyText returns the action that rewrites the page's text before a
// shot: each time to shotEpoch plus its whole seconds since began (before
// it: minus), the time the test began by the real clock, or since
// shotClockEpoch when it is a time of the fixed clock (shotClock: the
// nearer of the two), each UUID to shotEventID, and each of literal's keys
// (an address, a process name) to its value.
func steadyText(began time.Time, literal map[string]string) chromedp.Action[chromedp.Void] {
	pairs := [][2]string{}
	for from, to := range literal {
		pairs = append(pairs, [2]string{from, to})
	}
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		args, err := json.Marshal([]any{[]int64{began.UnixMilli(), shotClockEpoch.UnixMilli()}, shotEpoch.UnixMilli(), shotFraction, shotEventID, pairs})
		if err != nil {
			return chromedp.Void{}, err
		}
		_, err = chromedp.Evaluate[bool](steadyTextJS+"(..."+string(args)+")")(ctx, tg)
		return chromedp.Void{}, err
	}
}

// writeScreenshot writes shot to path unless the image already there looks
// the same (sameLook). So make screenshots leaves the tree clean when the
// pages did not change.
func writeScreenshot(path string, shot []byte) error {
	if old, err := os.ReadFile(path); err == nil && sameLook(old, shot) {
		return nil
	}
	return os.WriteFile(path, shot, 0o644)
}

// sameLook reports whether the PNGs a and b look the same: they have the
// same width, and at most 1% of the taller one's pixels differ, where the
// rows by which one is taller (a line of text a few pixels higher, all
// else moved down by as much) count as differing and the rest are compared
// top-aligned above some row and bottom-aligned below it, whichever row
// makes the fewest differ.
func sameLook(a, b []byte) bool {
	ia, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		return false
	}
	ib, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return false
	}
	if ia.Bounds().Dy() > ib.Bounds().Dy() {
		ia, ib = ib, ia // ia is the shorter
	}
	ra, rb := ia.Bounds(), ib.Bounds()
	w, h, shift := ra.Dx(), ra.Dy(), rb.Dy()-ra.Dy()
	limit := w * rb.Dy() / 100
	if rb.Dx() != w || shift*w > limit {
		return false
	}
	// rowDiff counts the pixels of ia's row y that differ from ib's row
	// y+off.
	rowDiff := func(y, off int) int {
		n := 0
		for x := 0; x < w; x++ {
			if !sameColor(ia.At(ra.Min.X+x, ra.Min.Y+y), ib.At(rb.Min.X+x, rb.Min.Y+y+off)) {
				n++
			}
		}
		return n
	}
	// above[s]: the differing pixels of rows 0..s-1 top-aligned;
	// below[s]: of rows s..h-1 bottom-aligned.
	above, below := make([]int, h+1), make([]int, h+1)
	for y := 0; y < h; y++ {
		above[y+1] = above[y] + rowDiff(y, 0)
	}
	for y := h - 1; y >= 0; y-- {
		below[y] = below[y+1]
		if shift == 0 {
			below[y] += above[y+1] - above[y]
		} else {
			below[y] += rowDiff(y, shift)
		}
	}
	best := above[h]
	for s := 0; s <= h; s++ {
		best = min(best, above[s]+below[s])
	}
	return best+shift*w <= limit
}

func sameColor(a, b color.Color) bool {
	r1, g1, b1, a1 := a.RGBA()
	r2, g2, b2, a2 := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}

// TestSameLook: sameLook takes what a fresh run changes (a few pixels, a
// line a couple of pixels higher) for the same look, and a changed page
// (a block of pixels, rows added, another width) for a different one.
func TestSameLook(t *testing.T) {
	t.Parallel()
	const w, h = 200, 300
	// page draws a page whose every row differs from its neighbours, with
	// extra rows inserted at row at, and a block changed.
	page := func(width, at, extra int, block image.Rectangle) []byte {
		img := image.NewRGBA(image.Rect(0, 0, width, h+extra))
		for y := 0; y < h+extra; y++ {
			src := y
			switch {
			case y >= at && y < at+extra:
				src = -1 // an inserted row
			case y >= at+extra:
				src = y - extra
			}
			for x := 0; x < width; x++ {
				c := color.RGBA{uint8(src * 7), uint8(x * 3), uint8(src ^ x), 255}
				if src < 0 {
					c = color.RGBA{255, 255, 255, 255}
				}
				if (image.Point{x, src}).In(block) {
					c = color.RGBA{0, 0, 0, 255}
				}
				img.Set(x, y, c)
			}
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	none := image.Rectangle{}
	base := page(w, 0, 0, none)
	for _, tc := range []struct {
		name string
		shot []byte
		same bool
	}{
		{"the same image", page(w, 0, 0, none), true},
		{"a time's digits (0.5% of the pixels)", page(w, 0, 0, image.Rect(10, 10, 40, 20)), true},
		{"a line 2 px higher at row 100", page(w, 100, 2, none), true},
		{"a line 2 px higher and a time's digits", page(w, 100, 2, image.Rect(10, 200, 20, 210)), true},
		{"a block of 1.5% of the pixels", page(w, 0, 0, image.Rect(10, 10, 40, 40)), false},
		{"10 rows more (3%)", page(w, 100, 10, none), false},
		{"another width", page(w+2, 0, 0, none), false},
		{"not a PNG", []byte("nope"), false},
	} {
		if got := sameLook(base, tc.shot); got != tc.same {
			t.Errorf("%s: sameLook %v, want %v", tc.name, got, tc.same)
		}
		if got := sameLook(tc.shot, base); got != tc.same {
			t.Errorf("%s, the other way round: sameLook %v, want %v", tc.name, got, tc.same)
		}
	}
}
