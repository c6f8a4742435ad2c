package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
)

// AdminName is the name of the admin token, in logs and the audit trail.
// No other token may take it.
const AdminName = "admin"

// MaxNameLength bounds a token's name.
const MaxNameLength = 32

// Token is a configured token: its name, scope and value. Only its name
// and scope ever leave the process.
type Token struct {
	Name  string
	Scope Scope
	Value string
}

// CheckName returns why name cannot name a token, or "": 1 to 32 of a-z,
// 0-9, '-', '_' and '.', starting with a letter or a digit.
func CheckName(name string) string {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Sprintf("must have 1 to %d characters", MaxNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return "must be lower-case letters, digits, '-', '_' and '.', starting with a letter or a digit"
		}
	}
	return ""
}

// ParseReadTokens parses a comma-separated list of name:token pairs, the
// format of HOOKGATE_READ_TOKENS: "ci-reader:3f9a…,grafana:77c1…". Space
// around an entry is dropped, and an empty s is none. Its error names the
// entry by its position and name, never by its value.
func ParseReadTokens(s string) ([]Token, error) {
	var out []Token
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		name, value, ok := strings.Cut(f, ":")
		if !ok || value == "" {
			return nil, fmt.Errorf("read token %d: must be name:token", i+1)
		}
		if why := CheckName(name); why != "" {
			return nil, fmt.Errorf("read token %d: its name %s", i+1, why)
		}
		out = append(out, Token{Name: name, Scope: Read, Value: value})
	}
	return out, nil
}

// Tokens are the tokens a process accepts: the admin token (named
// [AdminName]) and the read tokens. It keeps their SHA-256 digests only.
type Tokens struct {
	entries []entry
}

type entry struct {
	caller Caller
	digest [32]byte
}

// NewTokens returns the tokens admin (none when "") and read. It refuses a
// read token whose name is not valid, is taken twice or is [AdminName],
// one whose scope is not [Read], and one whose value is the admin token's
// or another read token's. Its errors never contain a value.
func NewTokens(admin string, read []Token) (*Tokens, error) {
	t := &Tokens{}
	if admin != "" {
		t.entries = append(t.entries, entry{Caller{AdminName, Admin}, sha256.Sum256([]byte(admin))})
	}
	names := map[string]bool{}
	values := map[[32]byte]string{}
	if admin != "" {
		values[t.entries[0].digest] = AdminName
	}
	for _, tk := range read {
		if why := CheckName(tk.Name); why != "" {
			return nil, fmt.Errorf("read token %q: its name %s", tk.Name, why)
		}
		if tk.Name == AdminName {
			return nil, fmt.Errorf("read token %q: the name %q is the admin token's", tk.Name, AdminName)
		}
		if names[tk.Name] {
			return nil, fmt.Errorf("read token %q: the name is given twice", tk.Name)
		}
		if tk.Scope != Read {
			return nil, fmt.Errorf("read token %q: scope %q: must be %q", tk.Name, tk.Scope, Read)
		}
		if tk.Value == "" {
			return nil, fmt.Errorf("read token %q: its value is empty", tk.Name)
		}
		names[tk.Name] = true
		d := sha256.Sum256([]byte(tk.Value))
		if other, ok := values[d]; ok {
			return nil, fmt.Errorf("read token %q: it has the same value as token %q: each token must be different", tk.Name, other)
		}
		values[d] = tk.Name
		t.entries = append(t.entries, entry{Caller{tk.Name, Read}, d})
	}
	return t, nil
}

// Empty reports whether t accepts no token at all.
func (t *Tokens) Empty() bool { return t == nil || len(t.entries) == 0 }

// HasAdmin reports whether t has an admin token.
func (t *Tokens) HasAdmin() bool { return !t.Empty() && t.entries[0].caller.Scope == Admin }

// Check returns the caller whose token is token, and false when none is.
// It compares SHA-256 digests in constant time with every token, so
// neither the values, their lengths nor which token matched leak through
// timing.
func (t *Tokens) Check(token string) (Caller, bool) {
	if t.Empty() {
		return Caller{}, false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Caller{}, false
	}
	return t.entries[found].caller, true
}

// Digest returns the SHA-256 digest of the token of c, and false when t
// has no such token (same name and scope). A console session is bound to
// it, so that a session ends when its token is removed or changed.
func (t *Tokens) Digest(c Caller) ([32]byte, bool) {
	if t.Empty() {
		return [32]byte{}, false
	}
	for _, e := range t.entries {
		if e.caller == c {
			return e.digest, true
		}
	}
	return [32]byte{}, false
}
