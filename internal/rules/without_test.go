package rules

import (
	"reflect"
	"strings"
	"testing"
)

// without removes the members its pointers name, at any depth, and keeps
// everything else as it was: numbers as written, other members of the
// objects on the path.
func TestWithoutRemovesNamedMembers(t *testing.T) {
	in := []byte(`{"a":{"b":1,"c":{"d":2,"e":3},"f":[1,2]},"big":820982911946154508,"g/h":4,"i~j":5,"k":"v"}`)
	cases := map[string]string{
		`body.without(["/a/b"])`:                     `{"a":{"c":{"d":2,"e":3},"f":[1,2]},"big":820982911946154508,"g/h":4,"i~j":5,"k":"v"}`,
		`body.without(["/a/c/d", "/k"])`:             `{"a":{"b":1,"c":{"e":3},"f":[1,2]},"big":820982911946154508,"g/h":4,"i~j":5}`,
		`body.without(["/g~1h", "/i~0j"])`:           `{"a":{"b":1,"c":{"d":2,"e":3},"f":[1,2]},"big":820982911946154508,"k":"v"}`,
		`body.without(["/a", "/a/b"])`:               `{"big":820982911946154508,"g/h":4,"i~j":5,"k":"v"}`,
		`body.without(["/a/c/d", "/a/c"])`:           `{"a":{"b":1,"f":[1,2]},"big":820982911946154508,"g/h":4,"i~j":5,"k":"v"}`,
		`body.a.without(["/c/e"])`:                   `{"b":1,"c":{"d":2},"f":[1,2]}`,
		`body.without([])`:                           string(in),
		`body.without(["/missing", "/a/x/y"])`:       string(in),
		`body.without(["/a/f/0", "/k/x", "/big/1"])`: string(in), // through a list, a string, a number: nothing
		// A map the rule builds.
		`{"x": body.a, "y": {"z": 1, "w": 2}}.without(["/x/c", "/y/z"])`: `{"x":{"b":1,"f":[1,2]},"y":{"w":2}}`,
	}
	for expr, want := range cases {
		r, err := mustTransform(t, expr, "").Apply(NewActivation(Input{Body: in}), 1<<20)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if string(r.Body) != want {
			t.Errorf("%s\n got %s\nwant %s", expr, r.Body, want)
		}
	}
}

// The body a rule reads is not changed by without: another rule on the
// same delivery, and the same rule again, see every member.
func TestWithoutLeavesTheBodyAsItWas(t *testing.T) {
	a := NewActivation(Input{Body: []byte(`{"a":{"b":1,"c":2},"d":3}`)})
	tr := mustTransform(t, `body.without(["/a/b", "/d"])`, "")
	for range 2 {
		r, err := tr.Apply(a, 1<<20)
		if err != nil || string(r.Body) != `{"a":{"c":2}}` {
			t.Fatalf("%s, %v", r.Body, err)
		}
	}
	if ok, err := mustFilter(t, `body.a.b == 1 && body.d == 3`).Eval(a); !ok || err != nil {
		t.Errorf("the body lost members: %v, %v", ok, err)
	}
	if !reflect.DeepEqual(a.tree, map[string]any{"a": map[string]any{"b": int64(1), "c": int64(2)}, "d": int64(3)}) {
		t.Errorf("the parsed body changed: %v", a.tree)
	}
}

// A pointer read from the body that is not one, an item that is not a
// string, a value that is not a map: each is an error when the rule runs,
// which names the pointer by its place, never by its text.
func TestWithoutErrors(t *testing.T) {
	a := NewActivation(Input{Body: []byte(`{"a":{"b":1},"n":7,"secret":"data/object/hunter2","l":[1],"mixed":["/a",1],"p1":"a/b","p2":"","p3":"/a~2"}`)})
	for expr, want := range map[string]string{
		`body.without([body.p1])`:                  "without: pointer 1 does not start with /",
		`body.without(["/a", body.p2])`:            "without: pointer 2 names the whole value",
		`body.without([body.p3])`:                  "without: pointer 1 has a ~ that is not ~0 or ~1",
		`body.without([body.secret])`:              "without: pointer 1 does not start with /",
		`body.without(body.l)`:                     "no such overload",
		`body.without(body.mixed)`:                 "without needs a list of JSON pointers: item 2 is not a string",
		`body.n.without(["/a"])`:                   "without needs a map, not int",
		`body.without(["/x"]).a.without(["/b"]).b`: "no such key",
	} {
		_, err := mustTransform(t, `{"r": `+expr+`}`, "").Apply(a, 1<<20)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", expr, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error quotes the body: %v", expr, err)
		}
	}
	// A list of ints is refused when the rule is compiled.
	if _, err := CompileTransform(`body.without([1])`, "", 0); err == nil {
		t.Error("without([1]) compiled")
	}
}

// A pointer written in the rule is checked when the rule is compiled, with
// its line and column: a wrong one stops the configuration's load.
func TestWithoutPointersCheckedAtCompile(t *testing.T) {
	for expr, want := range map[string]string{
		"{\"a\": 1,\n \"b\": body.without([\"/ok\", \"data/x\"])}": "transform: ERROR: 2:28: without: pointer 2 does not start with /",
		`body.without(["/a~x"])`:                                   "transform: ERROR: 1:15: without: pointer 1 has a ~ that is not ~0 or ~1",
		`body.a.transformMap(k, v, v.without([""]))`:               "without: pointer 1 names the whole value",
	} {
		if _, err := CompileTransform(expr, "", 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", expr, err, want)
		}
	}
	if _, err := CompileFilter(`body.without(["/a"]).size() > 0`, 0); err != nil {
		t.Errorf("a filter with a valid pointer: %v", err)
	}
}

// A comprehension that calls without on every item of a long list is
// charged by what each call copies, and stops at the cost limit.
func TestWithoutIsCharged(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"m":{`)
	for i := range 2000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `_` + itoa(i) + `":1`)
	}
	b.WriteString(`},"items":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("0")
	}
	b.WriteString(`]}`)
	a := NewActivation(Input{Body: []byte(b.String())})
	_, err := mustTransform(t, `body.items.map(x, body.m.without(["/k"]))`, "").Apply(a, 1<<30)
	if err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Errorf("200 copies of 2,000 members: %v, want the cost limit", err)
	}
	if _, err := mustTransform(t, `body.m.without(["/k"])`, "").Apply(a, 1<<30); err != nil {
		t.Errorf("one copy: %v", err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// An activation given the parse of another on the same bytes reads it
// instead of parsing again; on other bytes, even equal ones, it parses.
func TestActivationReusesAParse(t *testing.T) {
	body := []byte(`{"a":{"b":1}}`)
	first := NewActivation(Input{Body: body})
	if first.Parsed() != nil {
		t.Fatal("a parse before any rule read the body")
	}
	if ok, err := mustFilter(t, `body.a.b == 1`).Eval(first); !ok || err != nil {
		t.Fatal(ok, err)
	}
	p := first.Parsed()
	if p == nil {
		t.Fatal("no parse after a filter read the body")
	}
	same := NewActivation(Input{Body: body, Parsed: p})
	r, err := mustTransform(t, `body.without(["/a/b"])`, "").Apply(same, 1<<20)
	if err != nil || string(r.Body) != `{"a":{}}` {
		t.Fatalf("%s, %v", r.Body, err)
	}
	if reflect.ValueOf(same.tree).Pointer() != reflect.ValueOf(first.tree).Pointer() {
		t.Error("the same bytes were parsed again")
	}
	other := NewActivation(Input{Body: []byte(`{"a":{"b":2}}`), Parsed: p})
	if ok, err := mustFilter(t, `body.a.b == 2`).Eval(other); !ok || err != nil {
		t.Errorf("another body read the first one's parse: %v, %v", ok, err)
	}
	if NewActivation(Input{Body: []byte("not json")}).Parsed() != nil {
		t.Error("a parse of a body that was never read")
	}
}

// A call of without is charged for the nested objects it copies, not only
// for its result's top-level members: a comprehension that copies a large
// nested object again and again stops at the cost limit.
func TestWithoutIsChargedForNestedCopies(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"data":{"object":{`)
	for i := range 5000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"m` + itoa(i) + `":1`)
	}
	b.WriteString(`}},"items":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("0")
	}
	b.WriteString(`]}`)
	a := NewActivation(Input{Body: []byte(b.String())})
	_, err := mustTransform(t, `body.items.map(i, body.without(["/data/object/m1"]))`, "").Apply(a, 1<<30)
	if err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Errorf("100 copies of a 5,000-member nested object: %v, want the cost limit", err)
	}
	if _, err := mustTransform(t, `body.without(["/data/object/m1"])`, "").Apply(a, 1<<30); err != nil {
		t.Errorf("one copy: %v", err)
	}
}
