package rules

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// maxWithoutPointers bounds the pointers of one call of without.
const maxWithoutPointers = 1000

// withoutFunction declares m.without(pointers): a copy of the map m
// without the members the JSON pointers (RFC 6901) name. A pointer whose
// path is missing, or passes through something other than an object,
// removes nothing. Only the objects on the pointers' paths are copied:
// the rest of m is shared, as CEL's values never change.
func withoutFunction() cel.EnvOption {
	return cel.Function("without",
		cel.MemberOverload("dyn_without_list_string", []*cel.Type{cel.DynType, cel.ListType(cel.StringType)}, cel.DynType,
			cel.BinaryBinding(without)))
}

// pathTree is the pointers of one call of without as a tree of member
// names: a leaf is a member to remove.
type pathTree map[string]pathTree

func without(m, ptrs ref.Val) ref.Val {
	l, ok := ptrs.(traits.Lister)
	if !ok {
		return types.NewErr("without needs a list of JSON pointers")
	}
	if n, ok := l.Size().(types.Int); !ok || n > maxWithoutPointers {
		return types.NewErr("without takes at most %d pointers", maxWithoutPointers)
	}
	tree := pathTree{}
	// An error names a pointer by its place in the list, not by its
	// text, which may come from the delivery.
	for i, it := 1, l.Iterator(); it.HasNext() == types.True; i++ {
		s, ok := it.Next().(types.String)
		if !ok {
			return types.NewErr("without needs a list of JSON pointers: item %d is not a string", i)
		}
		path, err := splitPointer(string(s))
		if err != nil {
			return types.NewErr("without: pointer %d %s", i, err)
		}
		tree.add(path)
	}
	mp, ok := m.(traits.Mapper)
	if !ok {
		return types.NewErr("without needs a map, not %s", m.Type().TypeName())
	}
	if g, ok := mp.Value().(map[string]any); ok {
		// The body's objects: copied as Go maps, written as JSON without
		// conversion (jsonWriter.goMap).
		return types.DefaultTypeAdapter.NativeToValue(tree.goWithout(g))
	}
	return tree.celWithout(mp)
}

// withoutCopied is how many members m.without(ptrs) copies: those of
// every object on the pointers' paths.
func withoutCopied(m, ptrs ref.Val) int {
	l, ok := ptrs.(traits.Lister)
	if !ok {
		return 0
	}
	tree := pathTree{}
	for it := l.Iterator(); it.HasNext() == types.True; {
		if s, ok := it.Next().(types.String); ok {
			if path, err := splitPointer(string(s)); err == nil {
				tree.add(path)
			}
		}
	}
	mp, ok := m.(traits.Mapper)
	if !ok {
		return 0
	}
	if g, ok := mp.Value().(map[string]any); ok {
		return tree.copied(g)
	}
	if s, ok := mp.Size().(types.Int); ok {
		return int(s)
	}
	return 0
}

// copied is how many members goWithout copies of m.
func (t pathTree) copied(m map[string]any) int {
	n := len(m)
	for name, sub := range t {
		if child, ok := m[name].(map[string]any); ok && sub != nil {
			n += sub.copied(child)
		}
	}
	return n
}

// add records path, a member to remove. A shorter path removes what a
// longer one under it would.
func (t pathTree) add(path []string) {
	for i, name := range path {
		sub, seen := t[name]
		if seen && sub == nil {
			return // an ancestor is removed already
		}
		if i == len(path)-1 {
			t[name] = nil
			return
		}
		if sub == nil {
			sub = pathTree{}
			t[name] = sub
		}
		t = sub
	}
}

func (t pathTree) goWithout(m map[string]any) map[string]any {
	out := maps.Clone(m)
	for name, sub := range t {
		v, ok := out[name]
		if !ok {
			continue
		}
		if sub == nil {
			delete(out, name)
			continue
		}
		if child, ok := v.(map[string]any); ok {
			out[name] = sub.goWithout(child)
		}
	}
	return out
}

// celWithout is goWithout for the maps a rule builds, whose values are
// CEL's.
func (t pathTree) celWithout(m traits.Mapper) ref.Val {
	out := make(map[ref.Val]ref.Val)
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		v := m.Get(k)
		if types.IsError(v) {
			return v
		}
		if ks, ok := k.(types.String); ok {
			if sub, named := t[string(ks)]; named {
				if sub == nil {
					continue
				}
				if child, ok := v.(traits.Mapper); ok {
					if g, ok := child.Value().(map[string]any); ok {
						v = types.DefaultTypeAdapter.NativeToValue(sub.goWithout(g))
					} else if v = sub.celWithout(child); types.IsError(v) {
						return v
					}
				}
			}
		}
		out[k] = v
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, out)
}

// splitPointer splits a JSON pointer into its member names, unescaped.
// The error says what is wrong with it, without quoting it.
func splitPointer(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("names the whole value, not a member")
	}
	if p[0] != '/' {
		return nil, errors.New("does not start with /")
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		if strings.Contains(s, "~") {
			for j := 0; j < len(s); j++ {
				if s[j] == '~' && (j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1')) {
					return nil, errors.New("has a ~ that is not ~0 or ~1")
				}
			}
			parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
		}
	}
	return parts, nil
}

// checkPointers checks the pointers written in the rule, those of a call
// of without whose list is a literal, when the rule is compiled: a wrong
// one stops the configuration's load instead of failing every forward.
// The error has the pointer's line and column, as CEL's own errors do.
func checkPointers(a *cel.Ast) error {
	native := a.NativeRep()
	var err error
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if err != nil || e.Kind() != celast.CallKind {
			return
		}
		c := e.AsCall()
		if c.FunctionName() != "without" || !c.IsMemberFunction() || len(c.Args()) != 1 || c.Args()[0].Kind() != celast.ListKind {
			return
		}
		for i, el := range c.Args()[0].AsList().Elements() {
			if el.Kind() != celast.LiteralKind {
				continue
			}
			s, ok := el.AsLiteral().(types.String)
			if !ok {
				continue
			}
			if _, perr := splitPointer(string(s)); perr != nil {
				loc := native.SourceInfo().GetStartLocation(el.ID())
				err = fmt.Errorf("ERROR: %d:%d: without: pointer %d %w", loc.Line(), loc.Column()+1, i+1, perr)
				return
			}
		}
	}))
	return err
}
