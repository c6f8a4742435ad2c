// Package access names who is calling the operator API or the console: the
// token's name and its scope. The handler and the console put a [Caller]
// in the request's context once the token is checked; whatever records an
// operator's action (a redelivery's cause, the audit trail) reads it back.
// It imports nothing of hookgate's.
package access

import "context"

// Scope is what a token may do.
type Scope string

const (
	// Read may read everything and change nothing.
	Read Scope = "read"
	// Admin may read and change everything.
	Admin Scope = "admin"
)

// Allows reports whether a token of scope s may do what needs scope need.
func (s Scope) Allows(need Scope) bool {
	switch s {
	case Admin:
		return true
	case Read:
		return need == Read
	}
	return false
}

// Caller is a checked token: its name and scope, never its value.
type Caller struct {
	Name  string
	Scope Scope
}

type callerKey struct{}

// With returns ctx carrying c. It also tells the [Noter] ctx carries, if
// any, of c.
func With(ctx context.Context, c Caller) context.Context {
	if n, ok := ctx.Value(noterKey{}).(Noter); ok {
		n.NoteCaller(c)
	}
	return context.WithValue(ctx, callerKey{}, c)
}

// Noter is told of the caller a request is checked to be, by whatever
// checks it further down (the console's sessions): the handler's request
// log line, written after the request, learns the caller's name this way.
type Noter interface{ NoteCaller(Caller) }

type noterKey struct{}

// WithNoter returns ctx carrying n, which [With] tells of the caller.
func WithNoter(ctx context.Context, n Noter) context.Context {
	return context.WithValue(ctx, noterKey{}, n)
}

// From returns the caller ctx carries, and false when there is none.
func From(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Name returns the name of the caller ctx carries, or "" when there is none.
func Name(ctx context.Context) string {
	c, _ := From(ctx)
	return c.Name
}
