package rules

import (
	"net/http"
	"strings"
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
