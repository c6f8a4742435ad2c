package access_test

import (
	"context"
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
