// Package rules compiles and runs a target's CEL rules: a filter that
// decides whether a delivery is forwarded to the target, and a transform
// that reshapes the forwarded body and adds headers.
//
// CEL (cel.dev/cel-go) is typed, compiled once and not Turing-complete:
// every program here runs under a cost limit, so a runaway expression
// stops with an error instead of stalling the hot path.
//
// A rule sees these variables:
//
//   - body: the JSON body as CEL maps, lists, strings, numbers, bools and
//     null (absent when the body is not JSON: a rule that reads it fails)
//   - raw: the body as bytes
//   - headers: the sender's headers, lower-case names to the first value
//   - event_type, sender, delivery_id: strings
//
// Errors carry CEL's message only: never the body or a header value.
package rules

import (
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
)

// Cost limits, in CEL's cost units: about one per operation, more for
// work that grows with a string's or a list's size. A rule runs on every
// delivery of its sender, on the hot path, so its limit bounds what one
// delivery can cost a core.
//
// DefaultCostLimit lets a rule walk a list of some thousands of items a
// few times: far more than the rules the docs show, which cost tens of
// units. A comprehension over 5,000 items reached it in 7 to 25 ms on a
// busy 2-core machine. MaxCostLimit, the highest a target may set with
// rule_cost_limit, is ten times that (100 to 170 ms there): the
// per-expression limit Kubernetes sets for its CEL rules. A rule that
// needs more should not run on every delivery.
const (
	DefaultCostLimit uint64 = 100_000
	MaxCostLimit     uint64 = 1_000_000
)

// maxExprLen bounds an expression's size in code points.
const maxExprLen = 10_000

var (
	envOnce sync.Once
	env     *cel.Env
	guards  []*functions.Overload
	envErr  error
)

// celEnv is the one environment every rule is compiled in. A *cel.Env
// is safe for concurrent use.
func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, envErr = cel.NewEnv(
			cel.Variable("body", cel.DynType),
			cel.Variable("raw", cel.BytesType),
			cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
			cel.Variable("event_type", cel.StringType),
			cel.Variable("sender", cel.StringType),
			cel.Variable("delivery_id", cel.StringType),
			cel.CrossTypeNumericComparisons(true),
			cel.DefaultUTCTimeZone(true),
			cel.OptionalTypes(),
			cel.ParserExpressionSizeLimit(maxExprLen),
			ext.Strings(),
			ext.Encoders(),
			ext.Math(),
			ext.TwoVarComprehensions(),
			withoutFunction(),
		)
		if envErr == nil {
			guards, envErr = sizeGuards(env)
		}
	})
	return env, envErr
}

// compile parses and type-checks expr and builds its program under
// costLimit (0 means DefaultCostLimit).
func compile(rule, expr string, costLimit uint64) (cel.Program, *cel.Type, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil, errorf(rule, "empty expression")
	}
	if costLimit == 0 {
		costLimit = DefaultCostLimit
	}
	if costLimit > MaxCostLimit {
		return nil, nil, errorf(rule, "cost limit %d is above the maximum %d", costLimit, MaxCostLimit)
	}
	e, err := celEnv()
	if err != nil {
		return nil, nil, errorf(rule, "CEL environment: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, nil, errorf(rule, "%s", compileMessage(iss.Err().Error()))
	}
	if err := checkPointers(ast); err != nil {
		return nil, nil, errorf(rule, "%s", err)
	}
	prg, err := e.Program(ast,
		cel.CostLimit(costLimit),
		cel.CostTracking(sizeCost{}),
		cel.EvalOptions(cel.OptOptimize),
		// Functions is deprecated for declaring functions; here it
		// replaces the implementations of declared ones, per program.
		cel.Functions(guards...), //nolint:staticcheck // see sizeGuards
	)
	if err != nil {
		return nil, nil, errorf(rule, "%w", err)
	}
	return prg, ast.OutputType(), nil
}

// compileMessage keeps CEL's message, with its line:column and the
// caret under the column, and drops the "<input>" CEL names the source.
func compileMessage(m string) string {
	return strings.ReplaceAll(m, "<input>:", "")
}

// typeName names a CEL type in an error.
func typeName(t *cel.Type) string {
	if t == nil {
		return "unknown"
	}
	return t.String()
}

// isDyn reports whether t is dyn (the type checker could not tell).
func isDyn(t *cel.Type) bool { return t.IsExactType(types.DynType) }
