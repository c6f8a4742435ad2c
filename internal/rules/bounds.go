package rules

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// CEL charges a call's cost after the call, by the size of its result.
// replace, join and format can make a result much larger than their
// arguments (body.s.replace("a", body.s) squares a string's size), so
// the string is built before the cost limit can stop it. These bounds
// are checked before the call instead.
const (
	// maxStringBytes bounds a string that replace, join or format makes.
	// Under the cost limits, a rule can build only some megabytes of
	// strings anyway: this stops one call from allocating gigabytes.
	maxStringBytes = 16 << 20
	// maxResultBytes bounds a transform's JSON result when Apply is given
	// no limit: the highest max_body_bytes.
	maxResultBytes = 64 << 20
	// maxHeaderBytes bounds the headers a transform adds, names and
	// values together.
	maxHeaderBytes = 16 << 10
)

// sizeGuards returns the overloads of replace, join and format wrapped
// in a check of the size of the string they would make.
func sizeGuards(e *cel.Env) ([]*functions.Overload, error) {
	fns := e.Functions()
	var out []*functions.Overload
	for name, size := range map[string]func([]ref.Val) int{"replace": replaceSize, "join": joinSize, "format": formatSize} {
		fd, ok := fns[name]
		if !ok {
			return nil, fmt.Errorf("no function %s to bound", name)
		}
		bs, err := fd.Bindings()
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			out = append(out, guard(name, b, size))
		}
	}
	return out, nil
}

// guard wraps o's implementations with a check of size(args).
func guard(name string, o *functions.Overload, size func([]ref.Val) int) *functions.Overload {
	g := *o
	check := func(args ...ref.Val) ref.Val {
		if n := size(args); n > maxStringBytes {
			return types.NewErr("%s would make a string of over %d bytes", name, maxStringBytes)
		}
		return nil
	}
	if f := o.Unary; f != nil {
		g.Unary = func(v ref.Val) ref.Val {
			if err := check(v); err != nil {
				return err
			}
			return f(v)
		}
	}
	if f := o.Binary; f != nil {
		g.Binary = func(a, b ref.Val) ref.Val {
			if err := check(a, b); err != nil {
				return err
			}
			return f(a, b)
		}
	}
	if f := o.Function; f != nil {
		g.Function = func(args ...ref.Val) ref.Val {
			if err := check(args...); err != nil {
				return err
			}
			return f(args...)
		}
	}
	return &g
}

// replaceSize is the size of s.replace(old, new[, n]).
func replaceSize(args []ref.Val) int {
	if len(args) < 3 {
		return 0
	}
	s, ok1 := args[0].(types.String)
	old, ok2 := args[1].(types.String)
	repl, ok3 := args[2].(types.String)
	if !ok1 || !ok2 || !ok3 || len(repl) <= len(old) {
		return 0
	}
	n := strings.Count(string(s), string(old))
	if len(args) == 4 {
		if lim, ok := args[3].(types.Int); ok && lim >= 0 && int(lim) < n {
			n = int(lim)
		}
	}
	return len(s) + n*(len(repl)-len(old))
}

// joinSize is the size of list.join([sep]).
func joinSize(args []ref.Val) int {
	l, ok := args[0].(traits.Lister)
	if !ok {
		return 0
	}
	sep := 0
	if len(args) == 2 {
		if s, ok := args[1].(types.String); ok {
			sep = len(s)
		}
	}
	n := 0
	for it := l.Iterator(); it.HasNext() == types.True && n <= maxStringBytes; {
		if s, ok := it.Next().(types.String); ok {
			n += len(s) + sep
		}
	}
	return n
}

// formatSize is about the size of format.format(args): the format and
// its arguments as text.
func formatSize(args []ref.Val) int {
	n := 0
	for _, a := range args {
		n += valueSize(a, maxStringBytes-n)
	}
	return n
}

// valueSize is about the size of v as text, counted until over budget.
func valueSize(v ref.Val, budget int) int {
	switch x := v.(type) {
	case types.String:
		return len(x)
	case types.Bytes:
		return len(x)
	case traits.Lister:
		n := 2
		for it := x.Iterator(); it.HasNext() == types.True && n <= budget; {
			n += valueSize(it.Next(), budget-n) + 2
		}
		return n
	case traits.Mapper:
		n := 2
		for it := x.Iterator(); it.HasNext() == types.True && n <= budget; {
			k := it.Next()
			n += valueSize(k, budget-n) + 2
			n += valueSize(x.Get(k), budget-n) + 2
		}
		return n
	}
	return 24
}

// sizeCost charges a call that returns a string or bytes by the result's
// size, as CEL's own model charges a concatenation (a tenth of a unit a
// byte). CEL charges by overload, and on JSON values (of type dyn) a
// call such as body.s + body.s has no single overload: it would cost 1
// whatever it built.
type sizeCost struct{}

// A call of without is charged a unit per member it copied, at every
// depth.
func (sizeCost) CallCost(function, _ string, args []ref.Val, result ref.Val) *uint64 {
	var n int
	switch r := result.(type) {
	case types.String:
		n = len(r)
	case types.Bytes:
		n = len(r)
	case traits.Mapper:
		if function != "without" || len(args) != 2 {
			return nil
		}
		n = withoutCopied(args[0], args[1]) * 10
	default:
		return nil
	}
	c := uint64(1 + n/10)
	return &c
}
