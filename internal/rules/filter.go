package rules

import (
	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
)

// Filter is a compiled filter: a CEL expression of type bool. It is
// compiled once per configuration and safe for concurrent use.
type Filter struct {
	src string
	prg cel.Program
}

// CompileFilter parses and type-checks expr, which must be of type
// bool, and builds its program under costLimit (0: DefaultCostLimit;
// above MaxCostLimit is refused). A compile error carries CEL's
// message with the line:column.
func CompileFilter(expr string, costLimit uint64) (*Filter, error) {
	prg, t, err := compile("filter", expr, costLimit)
	if err != nil {
		return nil, err
	}
	if !t.IsExactType(types.BoolType) {
		hint := ""
		if isDyn(t) {
			hint = " (compare the value, for example body.livemode == true)"
		}
		return nil, errorf("filter", "the expression must return a bool, not %s%s", typeName(t), hint)
	}
	return &Filter{src: expr, prg: prg}, nil
}

// String returns the filter's source.
func (f *Filter) String() string { return f.src }

// Eval runs the filter on a delivery: true forwards it. A missing key
// read without has(), a wrong type or the cost limit is an error.
func (f *Filter) Eval(a *Activation) (bool, error) {
	v, _, err := f.prg.Eval(a)
	if err != nil {
		return false, evalError("filter", err, f.src, a)
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, errorf("filter", "returned %s, not a bool", v.Type().TypeName())
	}
	return bool(b), nil
}
