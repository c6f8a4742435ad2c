package rules

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// eval compiles expr as a filter and runs it on in.
func eval(t *testing.T, expr string, in Input) (bool, error) {
	t.Helper()
	f, err := CompileFilter(expr, 0)
	if err != nil {
		t.Fatalf("compile %q: %v", expr, err)
	}
	return f.Eval(NewActivation(in))
}

func jsonInput(body string) Input {
	return Input{Sender: "s", DeliveryID: "d1", EventType: "e", Body: []byte(body), ContentType: "application/json",
		Headers: http.Header{"X-Tenant": {"acme", "other"}}}
}

func TestFilterDecides(t *testing.T) {
	in := jsonInput(`{"a":{"n":2000,"f":1.5,"ok":true},"s":"x"}`)
	for expr, want := range map[string]bool{
		`body.a.n > 1000 && body.a.ok`:               true,
		`body.a.f > 1`:                               true,
		`body.a.n == 2000`:                           true,
		`body.s == "y"`:                              false,
		`has(body.missing)`:                          false,
		`has(body.a.missing) && body.a.missing == 1`: false,
		`headers["x-tenant"] == "acme"`:              true,
		`sender == "s" && delivery_id == "d1" && event_type == "e"`: true,
	} {
		got, err := eval(t, expr, in)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", expr, got, err, want)
		}
	}
}

func TestFilterMissingKeyIsAnError(t *testing.T) {
	_, err := eval(t, `body.missing == 1`, jsonInput(`{"a":1}`))
	if err == nil || !strings.Contains(err.Error(), "no such key: missing") {
		t.Fatalf("err = %v, want no such key", err)
	}
}

func TestTransformBodyAndHeaders(t *testing.T) {
	tr, err := CompileTransform(`{"b": body.a, "t": headers["x-tenant"]}`, `{"X-Tenant": headers["x-tenant"]}`, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tr.Apply(NewActivation(jsonInput(`{"a":[1,2.5,"x",null]}`)), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Body) != `{"b":[1,2.5,"x",null],"t":"acme"}` || r.ContentType != "application/json" || r.Headers["X-Tenant"] != "acme" {
		t.Fatalf("got %s %q %v", r.Body, r.ContentType, r.Headers)
	}
}

func TestHasGuards(t *testing.T) {
	in := jsonInput(`{"a":{"b":"x"},"s":"str","l":[1]}`)
	for expr, want := range map[string]bool{
		`has(body.a.b) && body.a.b == "x"`:        true,
		`has(body.a.c) && body.a.c == "x"`:        false,
		`has(body.s.c)`:                           false, // a string has no field
		`!has(body.zz) || body.zz.deep == 1`:      true,
		`body.?a.?c.?d.orValue("none") == "none"`: true,
	} {
		got, err := eval(t, expr, in)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", expr, got, err, want)
		}
	}
	for _, expr := range []string{`body.a.c == "x"`, `body.zz.deep == 1`, `body.a.b > 1`} {
		if _, err := eval(t, expr, in); err == nil {
			t.Errorf("%s: no error", expr)
		}
	}
}

func TestNonJSONBodyHasRawOnly(t *testing.T) {
	in := Input{Body: []byte("token=abc&team_domain=acme&text=deploy"), ContentType: "application/x-www-form-urlencoded"}
	got, err := eval(t, `string(raw).contains("team_domain=acme")`, in)
	if err != nil || !got {
		t.Errorf("raw: %v, %v", got, err)
	}
	_, err = eval(t, `body.team_domain == "acme"`, in)
	var re *Error
	if !errors.As(err, &re) || re.Rule != "filter" || !strings.Contains(re.Msg, "no such attribute(s): body") || !strings.Contains(re.Msg, "read raw") {
		t.Errorf("body on a form: %v", err)
	}
	// A transform may send it on as is, with the sender's Content-Type.
	tr := mustTransform(t, `raw`, "")
	r, err := tr.Apply(NewActivation(in), 100)
	if err != nil || string(r.Body) != string(in.Body) || r.ContentType != in.ContentType {
		t.Errorf("raw transform: %q %q %v", r.Body, r.ContentType, err)
	}
	// JSON after a first value is not one JSON value either.
	if _, err := eval(t, `body == 1`, Input{Body: []byte(`1 2`)}); err == nil {
		t.Error(`body of "1 2": no error`)
	}
}

func TestCostLimitStopsAComprehension(t *testing.T) {
	// 3,000 items: the quadratic walk below costs millions.
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 3000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", i)
	}
	b.WriteString(`]}`)
	a := NewActivation(Input{Body: []byte(b.String())})
	f := mustFilter(t, `body.items.all(x, body.items.exists(y, y == x))`)
	_, err := f.Eval(a)
	if err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Fatalf("err = %v, want the cost limit", err)
	}
	tr := mustTransform(t, `body.items.map(x, body.items.filter(y, y < x).size())`, "")
	if _, err := tr.Apply(a, 1<<30); err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Fatalf("transform err = %v, want the cost limit", err)
	}
	// A single pass fits the default limit; a higher limit lets more run.
	if ok, err := mustFilter(t, `body.items.all(x, x >= 0)`).Eval(a); err != nil || !ok {
		t.Errorf("one pass: %v, %v", ok, err)
	}
	small, err := CompileFilter(`body.items.all(x, x >= 0)`, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Eval(a); err == nil {
		t.Error("a limit of 100 let 3,000 items through")
	}
	if _, err := CompileFilter(`true`, MaxCostLimit+1); err == nil {
		t.Error("a cost limit above MaxCostLimit compiled")
	}
}

func TestCompileErrorsHaveLineAndColumn(t *testing.T) {
	for expr, want := range map[string]string{
		`body.a ==`:                         "1:10",
		"body.a == 1 &&\n  undeclared == 2": "2:3: undeclared reference to 'undeclared'",
		`event_type + 1 == 2`:               "1:12: found no matching overload for '_+_'",
	} {
		_, err := CompileFilter(expr, 0)
		var re *Error
		if !errors.As(err, &re) || re.Rule != "filter" || !strings.Contains(re.Msg, want) {
			t.Errorf("%q: %v, want %q", expr, err, want)
		}
	}
	for expr, want := range map[string]string{
		`body.livemode`: "must return a bool, not dyn",
		`1`:             "must return a bool, not int",
	} {
		if _, err := CompileFilter(expr, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", expr, err, want)
		}
	}
	for body, want := range map[string]string{`1`: "not int", `true`: "not bool"} {
		if _, err := CompileTransform(body, "", 0); err == nil || !strings.Contains(err.Error(), "transform: the expression must return a map, a list, a string or bytes, "+want) {
			t.Errorf("transform %q: %v", body, err)
		}
	}
	for hdr, want := range map[string]string{`"x"`: "not string", `{"a": 1}`: "not map(string, int)"} {
		if _, err := CompileTransform("", hdr, 0); err == nil || !strings.Contains(err.Error(), "transform_headers: the expression must return a map of strings to strings, "+want) {
			t.Errorf("headers %q: %v", hdr, err)
		}
	}
	if _, err := CompileTransform("", "", 0); err == nil {
		t.Error("an empty transform compiled")
	}
}

func TestTransformResults(t *testing.T) {
	in := Input{Body: []byte(`{"n":1,"s":"hi","when":"2026-01-02T03:04:05Z"}`), ContentType: "application/cloudevents+json"}
	for body, want := range map[string]struct{ body, ct string }{
		`body.s`:                          {"hi", "application/cloudevents+json"},
		`b"\x00\x01"`:                     {"\x00\x01", "application/cloudevents+json"},
		`[body.n, 2.5, null, true]`:       {`[1,2.5,null,true]`, "application/json"},
		`{"z": 1, "a": {"y": 2, "b": 3}}`: {`{"a":{"b":3,"y":2},"z":1}`, "application/json"},
		`{"t": timestamp(body.when)}`:     {`{"t":"2026-01-02T03:04:05Z"}`, "application/json"},
		`{"html": "<a href='x'>&</a>"}`:   {`{"html":"<a href='x'>&</a>"}`, "application/json"},
		`{"d": duration("90s")}`:          {`{"d":"1m30s"}`, "application/json"},
		`{"bytes": b"hi"}`:                {`{"bytes":"aGk="}`, "application/json"},
		`""`:                              {"", "application/cloudevents+json"},
	} {
		r, err := mustTransform(t, body, "").Apply(NewActivation(in), 1000)
		if err != nil || string(r.Body) != want.body || r.ContentType != want.ct || r.Body == nil {
			t.Errorf("%s: %q %q %v; want %q %q", body, r.Body, r.ContentType, err, want.body, want.ct)
		}
	}
	for body, want := range map[string]string{
		`body.n`:                 "returned int, not a map",
		`{1: "a"}`:               "a map key in the result is int",
		`{"x": 0.0 / 0.0}`:       "NaN or infinite",
		`{"x": optional.none()}`: "which JSON cannot carry",
	} {
		_, err := mustTransform(t, body, "").Apply(NewActivation(in), 1000)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	// Headers may set the Content-Type, of a string body as of JSON.
	r, err := mustTransform(t, `body.s`, `{"content-type": "text/plain; charset=utf-8", "x-a": "1"}`).Apply(NewActivation(in), 1000)
	if err != nil || r.ContentType != "text/plain; charset=utf-8" || !reflect.DeepEqual(r.Headers, map[string]string{"X-A": "1"}) {
		t.Errorf("content type from headers: %q %v %v", r.ContentType, r.Headers, err)
	}
}

func TestTransformBodyLimit(t *testing.T) {
	tr := mustTransform(t, `{"text": body.s + body.s}`, "")
	a := NewActivation(Input{Body: []byte(`{"s":"0123456789"}`)})
	if _, err := tr.Apply(a, 31); err != nil {
		t.Fatalf("within the limit: %v", err)
	}
	_, err := tr.Apply(a, 30)
	if err == nil || !strings.Contains(err.Error(), "transform: the body would be 31 bytes, over the limit of 30") {
		t.Fatalf("over the limit: %v", err)
	}
}

func TestTransformHeadersRefused(t *testing.T) {
	a := NewActivation(Input{Body: []byte(`{"v":"a\r\nX-Evil: 1","n":1}`)})
	for hdr, want := range map[string]string{
		`{"Webhook-Signature": "v1,x"}`:    "may not set the header Webhook-Signature",
		`{"webhook-id": "x"}`:              "may not set the header Webhook-Id",
		`{"WEBHOOK-TIMESTAMP": "1"}`:       "may not set the header Webhook-Timestamp",
		`{"idempotency-key": "x"}`:         "may not set the header Idempotency-Key",
		`{"Connection": "close"}`:          "may not set the header Connection",
		`{"Transfer-Encoding": "chunked"}`: "may not set the header Transfer-Encoding",
		`{"Host": "evil.example"}`:         "may not set the header Host",
		`{"Content-Length": "1"}`:          "may not set the header Content-Length",
		`{"X-Hookgate-Sender": "other"}`:   "may not set the header X-Hookgate-Sender",
		`{"Bad Name": "x"}`:                "not a valid HTTP token",
		`{"X-Split\r\nEvil": "x"}`:         "not a valid HTTP token",
		`{"": "x"}`:                        "not a valid HTTP token",
		`{"X-A": body.v}`:                  "X-A has a control character",
		`{"X-A": body.n}`:                  "the value of header X-A is int, not a string",
		`{"X-A": "1", "x-a": "2"}`:         "the header X-A is set twice",
		`body`:                             "the value of header N is int, not a string",
	} {
		_, err := mustTransform(t, "", hdr).Apply(a, 0)
		if err == nil || !strings.HasPrefix(err.Error(), "transform_headers: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", hdr, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "Evil") {
			t.Errorf("%s: the error repeats the value: %v", hdr, err)
		}
	}
}

// No error holds a value of the delivery: errors reach logs, metrics'
// neighbours, the console and the API.
func TestErrorsHoldNoValue(t *testing.T) {
	const card, token = "4242 4242 4242 4242", "xoxb-1234-abcdefSECRET"
	in := Input{Body: []byte(`{"card":"` + card + `","k":"sk_live_KEYNAME","m":{},"when":"not-a-time-SECRETX"}`),
		Headers: http.Header{"Authorization": {"Bearer " + token}, "X-Token": {token}}}
	for _, expr := range []string{
		`int(body.card) > 0`,
		`int(headers["x-token"]) > 0`,
		`int(headers["authorization"]) > 0`,
		`body.m[body.k] == 1`,
		`timestamp(body.when) > timestamp("2020-01-01T00:00:00Z")`,
		`body.card.matches(body.k + "(")`,
		`double(body.card + "x") > 1.0`,
	} {
		_, err := eval(t, expr, in)
		if err == nil {
			t.Errorf("%s: no error", expr)
			continue
		}
		for _, v := range []string{card, token, "sk_live_KEYNAME", "SECRETX", "1234"} {
			if strings.Contains(err.Error(), v) {
				t.Errorf("%s: error %q holds %q", expr, err, v)
			}
		}
	}
	// Nor a literal of the rule, which ${VAR} may have filled in.
	if _, err := eval(t, `timestamp("tok-9f8e7d6c5b4a" + event_type) > timestamp("2020-01-01T00:00:00Z")`, in); err == nil || strings.Contains(err.Error(), "tok-9f8e7d6c5b4a") {
		t.Errorf("a literal: %v", err)
	}
	// Nor on a body that is not JSON.
	form := Input{Body: []byte("password=hunter2secret&n=abc")}
	_, err := eval(t, `int(string(raw).split("&")[0].split("=")[1]) > 0`, form)
	if err == nil || strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("form: %v", err)
	}
}

// One Activation is shared by every target's rules, on several goroutines.
func TestConcurrentEval(t *testing.T) {
	a := delivery(t, "stripe", "charge.succeeded", "stripe_charge_succeeded.json", http.Header{"X-Tenant": {"acme"}})
	f := mustFilter(t, `body.data.object.amount > 1000 && headers["x-tenant"] == "acme"`)
	tr := mustTransform(t, `{"id": body.id, "amount": body.data.object.amount}`, `{"X-Tenant": headers["x-tenant"]}`)
	want := `{"amount":2500,"id":"evt_3PqWz2LkdIwHu7ix0Vb1cXyZ"}`
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if ok, err := f.Eval(a); err != nil || !ok {
					errs <- fmt.Errorf("filter: %v, %w", ok, err)
					return
				}
				r, err := tr.Apply(a, 1000)
				if err != nil || string(r.Body) != want || r.Headers["X-Tenant"] != "acme" {
					errs <- fmt.Errorf("transform: %s %v %w", r.Body, r.Headers, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The same delivery gives the same bytes, every time.
func TestTransformIsDeterministic(t *testing.T) {
	tr := mustTransform(t, `body.transformMap(k, v, v)`, `{"X-B": "2", "X-A": "1"}`)
	var first []byte
	for i := range 50 {
		r, err := tr.Apply(delivery(t, "shopify", "", "shopify_order_create.json", nil), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Body
		} else if string(r.Body) != string(first) {
			t.Fatalf("run %d: %s\nfirst: %s", i, r.Body, first)
		}
	}
}

func BenchmarkFilterEval(b *testing.B) {
	body := payload(b, "stripe_charge_succeeded.json")
	f := mustFilter(b, `body.type == "charge.succeeded" && body.livemode == true && body.data.object.amount > 1000`)
	b.ReportAllocs()
	for b.Loop() {
		// A delivery parses its body once; the benchmark counts that.
		if ok, err := f.Eval(NewActivation(Input{Body: body})); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkTransformApply(b *testing.B) {
	body := payload(b, "shopify_order_create.json")
	tr := mustTransform(b, `{"text": "New order " + body.name + ": " + body.total_price + " " + body.currency}`, `{"X-Shop": "a"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Apply(NewActivation(Input{Body: body}), 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// A call whose result is much larger than its arguments is refused
// before it is made: the cost limit counts a result only once it exists.
func TestAmplificationIsRefusedBeforeItIsBuilt(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"pad":"` + strings.Repeat("x", 100_000) + `","items":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", i)
	}
	b.WriteString(`]}`)
	a := NewActivation(Input{Body: []byte(b.String())})
	for expr, want := range map[string]string{
		`body.pad.replace("x", body.pad)`:            "replace would make a string of over 16777216 bytes",
		`body.pad.replace("x", body.pad, 1000)`:      "replace would make a string of over",
		`body.items.map(x, body.pad).join("")`:       "join would make a string of over",
		`body.items.map(x, body.pad).join(",")`:      "join would make a string of over",
		`"%s".format([body.items.map(x, body.pad)])`: "format would make a string of over",
		`body.items.map(x, body.pad + body.pad)`:     "cost limit exceeded",
		`body.items.map(x, bytes(body.pad))`:         "cost limit exceeded",
		`body.items.map(x, body)`:                    "the body would be over the limit of 1048576 bytes",
		`body.items.map(x, {"k": raw})`:              "the body would be over the limit",
	} {
		tr := mustTransform(t, expr, "")
		var m1, m2 runtime.MemStats
		runtime.ReadMemStats(&m1)
		_, err := tr.Apply(a, 1<<20)
		runtime.ReadMemStats(&m2)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", expr, err, want)
		}
		// What was allocated is some times the body, not the result.
		if got := m2.TotalAlloc - m1.TotalAlloc; got > 64<<20 {
			t.Errorf("%s allocated %d MiB", expr, got>>20)
		}
	}
	// Within the bounds they work.
	tr := mustTransform(t, `{"a": "abc".replace("b", "xyz"), "j": ["a", "b"].join("-"), "f": "%d items".format([body.items.size()])}`, "")
	r, err := tr.Apply(a, 1<<20)
	if err != nil || string(r.Body) != `{"a":"axyzc","f":"1000 items","j":"a-b"}` {
		t.Errorf("%s, %v", r.Body, err)
	}
	// Headers are bounded too.
	if _, err := mustTransform(t, "", `{"X-A": body.pad}`).Apply(a, 0); err == nil || !strings.Contains(err.Error(), "the headers would be over 16384 bytes") {
		t.Errorf("a 100 kB header: %v", err)
	}
}

// The filter alone, on a delivery whose body another target's rule has
// already parsed.
func BenchmarkFilterEvalParsed(b *testing.B) {
	f := mustFilter(b, `body.type == "charge.succeeded" && body.livemode == true && body.data.object.amount > 1000`)
	a := NewActivation(Input{Body: payload(b, "stripe_charge_succeeded.json")})
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Eval(a); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// Numbers become int64 when written without a fraction or an exponent and
// within 64 bits, float64 otherwise, at any depth: in objects, in arrays,
// in objects in arrays.
func TestParseJSONNumbers(t *testing.T) {
	t.Parallel()
	v, err := parseJSON([]byte(`{"i":1,"n":-7,"f":1.0,"e":1e3,"E":2E-1,"max":9223372036854775807,"over":9223372036854775808,"inf":1e400,
  "s":"1","b":true,"z":null,"o":{"a":{"i":2,"f":2.5}},"l":[3,3.5,[4],{"i":5,"l":[6.0]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"i": int64(1), "n": int64(-7), "f": 1.0, "e": 1000.0, "E": 0.2, "max": int64(math.MaxInt64), "over": 9223372036854775808.0,
		"inf": math.Inf(1), "s": "1", "b": true, "z": nil, "o": map[string]any{"a": map[string]any{"i": int64(2), "f": 2.5}},
		"l": []any{int64(3), 3.5, []any{int64(4)}, map[string]any{"i": int64(5), "l": []any{6.0}}}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("parseJSON =\n%#v\nwant\n%#v", v, want)
	}
	for _, doc := range []string{`7`, `[1]`, `{"a":2.0}`} {
		v, err := parseJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]any{`7`: int64(7), `[1]`: []any{int64(1)}, `{"a":2.0}`: map[string]any{"a": 2.0}}[doc]; !reflect.DeepEqual(v, want) {
			t.Errorf("parseJSON(%s) = %#v, want %#v", doc, v, want)
		}
	}
}

// BenchmarkParseBody is the parse a delivery pays once for its rules.
func BenchmarkParseBody(b *testing.B) {
	body := payload(b, "stripe_charge_succeeded.json")
	b.ReportAllocs()
	for b.Loop() {
		if NewActivation(Input{Body: body}).jsonBody() == nil {
			b.Fatal("not JSON")
		}
	}
}
