package dedup

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Folding. On PostgreSQL (not Citus), the multi-row statements marked
// [Foldable] run inside the claim's statement, as data-modifying CTEs that
// read the keys the claim inserted from its RETURNING:
//
//	WITH k AS (<claim> RETURNING sender, delivery_id, event_id),
//	  f1 AS (<first statement, its guard a join to k>), …
//	SELECT delivery_id, event_id FROM k
//
// A row is written only for a delivery whose key this claim inserted, as
// [ClaimedJoin] guards it, without probing the key's index again, and the
// statements cost one execution instead of one each. On make bench's
// machine the outbox row of a forward cost PostgreSQL about 12 µs as a
// statement of its own and about 5 folded (docs/performance.md). The
// statement returns the keys the claim inserted, as claimReturningSQL
// does: a batch's deliveries whose keys it did not return found them held.
//
// Every CTE of one statement sees the same snapshot, and none sees what
// another writes: only statements that neither read what another writes
// nor depend on running in order may be foldable. The others run after the
// claim, in their own statements, as before. What holds a key the claim
// found held is read in a statement of its own, whose snapshot sees the
// keys that concurrent transactions committed meanwhile.

// The parts of [ClaimedJoin]'s text around its two expressions.
const (
	claimedJoinHead  = "CROSS JOIN LATERAL (SELECT k.sender FROM processed_messages k WHERE k.sender = $1 AND k.delivery_id >= "
	claimedJoinUpper = " AND k.delivery_id <= "
	claimedJoinMid   = " AND k.event_id = "
	claimedJoinTail  = " ORDER BY k.delivery_id OFFSET 0) AS k"
)

// claimParams is the number of parameters of claimSQL: the sender and its
// eight arrays.
const claimParams = 9

// foldable is a statement marked with [Foldable].
type foldable struct {
	id     int    // its number, from 1, in the order of marking
	folded string // its text with its guard a join to the claim's k
	params int    // its highest parameter number
}

var (
	foldMu    sync.Mutex
	foldables = map[string]*foldable{} // by the statement's text
	// foldedStatements caches the folded statements by their foldables.
	foldedStatements sync.Map // foldKey → string
)

// maxFolded is the most statements folded into one claim.
const maxFolded = 8

// foldKey names a folded statement: the ids of its foldables, in order.
type foldKey [maxFolded]uint16

// Foldable marks sql, a statement for [Batch.Row] guarded by one
// [ClaimedJoin], as one that may run inside the claim's statement, and
// returns it unchanged. sql must write one table with an INSERT, read
// nothing that another statement of the change writes, and have its
// parameters, after the sender $1, numbered from $2 without gaps. It
// panics otherwise: call it when a package's statements are defined.
func Foldable(sql string) string {
	foldMu.Lock()
	defer foldMu.Unlock()
	if _, ok := foldables[sql]; ok {
		return sql
	}
	folded, err := foldGuard(sql)
	if err != nil {
		panic("dedup.Foldable: " + err.Error())
	}
	params := 0
	rewriteParams(sql, func(n int) int { params = max(params, n); return n })
	if params < 2 {
		panic("dedup.Foldable: the statement takes no array parameter")
	}
	foldables[sql] = &foldable{id: len(foldables) + 1, folded: folded, params: params}
	return sql
}

// foldGuard returns sql with its ClaimedJoin replaced by a join to the
// claim's CTE k.
func foldGuard(sql string) (string, error) {
	if !strings.HasPrefix(strings.TrimSpace(sql), "INSERT INTO ") {
		return "", fmt.Errorf("%.40q…: not an INSERT", sql)
	}
	head := strings.Index(sql, claimedJoinHead)
	if head < 0 || strings.Count(sql, claimedJoinHead) != 1 {
		return "", fmt.Errorf("%.40q…: not guarded by one ClaimedJoin", sql)
	}
	rest := sql[head+len(claimedJoinHead):]
	mid := strings.Index(rest, claimedJoinMid)
	if mid < 0 {
		return "", fmt.Errorf("%.40q…: a ClaimedJoin without its event ID", sql)
	}
	deliveryID, upper, ok := strings.Cut(rest[:mid], claimedJoinUpper)
	if !ok || upper != deliveryID {
		return "", fmt.Errorf("%.40q…: a ClaimedJoin whose delivery ID's bounds differ", sql)
	}
	rest = rest[mid+len(claimedJoinMid):]
	tail := strings.Index(rest, claimedJoinTail)
	if tail < 0 {
		return "", fmt.Errorf("%.40q…: a ClaimedJoin without its end", sql)
	}
	eventID, after := rest[:tail], rest[tail+len(claimedJoinTail):]
	if strings.Contains(after, "RETURNING") || strings.Contains(sql[:head], "WITH ") {
		return "", fmt.Errorf("%.40q…: a CTE or a RETURNING cannot fold", sql)
	}
	return sql[:head] + "JOIN k ON k.delivery_id = " + deliveryID + " AND k.event_id = " + eventID + after, nil
}

// rewriteParams returns sql with each parameter $n renumbered f(n).
func rewriteParams(sql string, f func(n int) int) string {
	var b strings.Builder
	b.Grow(len(sql) + 16)
	for i := 0; i < len(sql); i++ {
		j := i + 1
		for sql[i] == '$' && j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		if j == i+1 {
			b.WriteByte(sql[i])
			continue
		}
		n, _ := strconv.Atoi(sql[i+1 : j])
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(f(n)))
		i = j - 1
	}
	return b.String()
}

// shiftParams returns sql with each parameter $n but $1 renumbered $n+by.
func shiftParams(sql string, by int) string {
	return rewriteParams(sql, func(n int) int {
		if n > 1 {
			n += by
		}
		return n
	})
}

// foldClaim returns the claim of sender's deliveries, with the claim's
// columns claim, and with the foldable statements of groups folded into it,
// and the groups left to run on their own. It returns the claim alone when
// no group is foldable.
func foldClaim(sender string, claim []any, groups []statement) (statement, []statement) {
	var (
		key   foldKey
		fs    [maxFolded]*foldable
		in    [maxFolded]int // index in groups
		n     int
		nArgs = 1 + len(claim)
	)
	foldMu.Lock()
	for i, g := range groups {
		if n == maxFolded {
			break
		}
		if f, ok := foldables[g.sql]; ok && len(g.args) == f.params {
			key[n], fs[n], in[n] = uint16(f.id), f, i
			nArgs += len(g.args) - 1
			n++
		}
	}
	foldMu.Unlock()
	args := make([]any, 0, nArgs)
	args = append(append(args, sender), claim...)
	if n == 0 {
		return statement{sql: claimReturningSQL, args: args}, groups
	}
	sql, ok := foldedStatements.Load(key)
	if !ok {
		sql, _ = foldedStatements.LoadOrStore(key, foldedSQL(fs[:n]))
	}
	rest := make([]statement, 0, len(groups)-n)
	next := 0
	for i, g := range groups {
		if next < n && in[next] == i {
			args = append(args, g.args[1:]...)
			next++
			continue
		}
		rest = append(rest, g)
	}
	return statement{sql: sql.(string), args: args}, rest
}

// foldedSQL is the claim with the statements fs folded into it, their
// parameters after the claim's, in order. It returns the keys the claim
// inserted.
func foldedSQL(fs []*foldable) string {
	var b strings.Builder
	b.WriteString("WITH k AS (\n")
	b.WriteString(claimSQL)
	b.WriteString("\nRETURNING sender, delivery_id, event_id\n)")
	at := claimParams // the last parameter number so far
	for i, f := range fs {
		text := shiftParams(f.folded, at-1)
		at += f.params - 1
		fmt.Fprintf(&b, ", f%d AS (\n%s\n)", i+1, text)
	}
	b.WriteString("\nSELECT delivery_id, event_id FROM k")
	return b.String()
}
