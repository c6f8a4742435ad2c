package access_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/access"
)

func TestScopeAllows(t *testing.T) {
	cases := []struct {
		have, need access.Scope
		want       bool
	}{
		{access.Admin, access.Admin, true},
		{access.Admin, access.Read, true},
		{access.Read, access.Read, true},
		{access.Read, access.Admin, false},
		{"", access.Read, false},
	}
	for _, c := range cases {
		if got := c.have.Allows(c.need); got != c.want {
			t.Errorf("%q.Allows(%q) = %v, want %v", c.have, c.need, got, c.want)
		}
	}
}

func TestCallerInContext(t *testing.T) {
	ctx := context.Background()
	if _, ok := access.From(ctx); ok {
		t.Fatal("an empty context carries a caller")
	}
	ctx = access.With(ctx, access.Caller{Name: "ci-reader", Scope: access.Read})
	c, ok := access.From(ctx)
	if !ok || c.Name != "ci-reader" || c.Scope != access.Read {
		t.Fatalf("From = %+v, %v", c, ok)
	}
	if access.Name(ctx) != "ci-reader" {
		t.Fatalf("Name = %q", access.Name(ctx))
	}
}

func TestParseReadTokens(t *testing.T) {
	got, err := access.ParseReadTokens(" ci-reader:aaa , grafana.x:b:c")
	if err != nil {
		t.Fatal(err)
	}
	want := []access.Token{{"ci-reader", access.Read, "aaa"}, {"grafana.x", access.Read, "b:c"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v", got)
	}
	if got, err := access.ParseReadTokens(" "); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"secretvalue", "Upper:secretvalue", ":secretvalue", "a:", "-a:secretvalue", "a b:secretvalue", "x,y"} {
		_, err := access.ParseReadTokens(bad)
		if err == nil {
			t.Errorf("%q: no error", bad)
			continue
		}
		if strings.Contains(err.Error(), "secretvalue") {
			t.Errorf("%q: the error quotes the value: %v", bad, err)
		}
	}
}

func TestTokens(t *testing.T) {
	tk, err := access.NewTokens("admin-secret", []access.Token{{"ci", access.Read, "read-secret"}, {"ops", access.Read, "ops-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]access.Caller{
		"admin-secret": {Name: "admin", Scope: access.Admin},
		"read-secret":  {Name: "ci", Scope: access.Read},
		"ops-secret":   {Name: "ops", Scope: access.Read},
	} {
		if c, ok := tk.Check(token); !ok || c != want {
			t.Errorf("Check(%q) = %+v, %v; want %+v", token, c, ok, want)
		}
	}
	if _, ok := tk.Check("nope"); ok {
		t.Error("a wrong token is accepted")
	}
	if _, ok := tk.Digest(access.Caller{Name: "ci", Scope: access.Admin}); ok {
		t.Error("Digest of a read token's name with scope admin")
	}
	for name, read := range map[string][]access.Token{
		"admin name":      {{"admin", access.Read, "x"}},
		"twice":           {{"a", access.Read, "x"}, {"a", access.Read, "y"}},
		"same as admin":   {{"a", access.Read, "admin-secret"}},
		"same as another": {{"a", access.Read, "x"}, {"b", access.Read, "x"}},
		"admin scope":     {{"a", access.Admin, "x"}},
		"bad name":        {{"A", access.Read, "x"}},
	} {
		_, err := access.NewTokens("admin-secret", read)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error quotes a value: %v", name, err)
		}
	}
}

type noted []access.Caller

func (n *noted) NoteCaller(c access.Caller) { *n = append(*n, c) }

func TestWithTellsTheNoter(t *testing.T) {
	var n noted
	ctx := access.WithNoter(context.Background(), &n)
	access.With(ctx, access.Caller{Name: "ci", Scope: access.Read})
	if len(n) != 1 || n[0].Name != "ci" {
		t.Fatalf("noted %+v", n)
	}
}
