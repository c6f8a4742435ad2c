package authlimit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/trustelem/zxcvbn/match"
	"github.com/trustelem/zxcvbn/matching"
	"github.com/trustelem/zxcvbn/scoring"
)

// MinTokenLength is the fewest characters an admin token may have.
const MinTokenLength = 32

// MinTokenBits is the least estimated entropy of an admin token that
// hookgate starts with. With it, guessing is hopeless at any rate. That is
// why a request with the right token goes through even when its client is
// limited.
const MinTokenBits = 128

// TokenHint says how to make a good admin token.
const TokenHint = "generate one with: openssl rand -hex 32 (or: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')"

// CheckToken returns why token is too weak to be the admin token, or nil.
// It refuses whitespace alone or around the token, and a run of characters
// repeated over and over. It refuses fewer than [MinTokenLength] characters
// and fewer than [MinTokenBits] by [EstimateBits]. It also refuses a token
// made mostly of what guessers try first, however long: words, names,
// common passwords, keyboard rows, sequences and dates. That is a
// [PatternShare] under [MinRandomShare]. The error never contains any part
// of the token.
func CheckToken(token string) error { return CheckTokenOf("admin token", token) }

// CheckTokenOf is [CheckToken] for any token: its errors begin with what,
// such as `read token "ci-reader"`. Read tokens are held to the same
// bar: the wrong-token limit never refuses a right token of any scope.
func CheckTokenOf(what, token string) error {
	if strings.TrimSpace(token) == "" {
		return errors.New(what + ": it is only whitespace; " + TokenHint)
	}
	if strings.TrimSpace(token) != token {
		// HTTP drops the whitespace around a header's value, so no request
		// could carry this token.
		return errors.New(what + ": it begins or ends with whitespace (a line break from the file or variable it was read from?), which no Authorization header can carry: remove it; " + TokenHint)
	}
	if p := period(token); p > 0 {
		if p == 1 {
			return errors.New(what + ": it is one character repeated; " + TokenHint)
		}
		return fmt.Errorf("%s: it is a pattern of %d characters repeated; %s", what, p, TokenHint)
	}
	if n, bits := len([]rune(token)), EstimateBits(token); n < MinTokenLength || bits < MinTokenBits {
		return fmt.Errorf("%s: it has %d characters and about %d bits of entropy, and must have at least %d and %d, so that it cannot be guessed; %s",
			what, n, int(bits), MinTokenLength, MinTokenBits, TokenHint)
	}
	if share, pbits, kinds := PatternShare(token); share < MinRandomShare {
		return fmt.Errorf("%s: it is made mostly of %s, which guessers try first: a password-strength estimator (zxcvbn) puts it at about %d bits, under %d%% of what random characters of its length would have; %s",
			what, joinKinds(kinds), int(pbits), int(MinRandomShare*100), TokenHint)
	}
	return nil
}

// period returns the length of the run of characters that token repeats
// at least twice over, or 0 when it repeats none.
func period(token string) int {
	r := []rune(token)
	for p := 1; p <= len(r)/2; p++ {
		same := true
		for i := p; i < len(r); i++ {
			if r[i] != r[i-p] {
				same = false
				break
			}
		}
		if same {
			return p
		}
	}
	return 0
}

// lowVariety is the share of the greatest Shannon entropy, for a token's
// length and alphabet, under which [EstimateBits] counts its characters as
// too little varied. Random tokens fall under it only by chance, and it is
// set so that they practically never do. The shortest random token
// hookgate takes, 16 bytes in hex, falls under it with probability
// 1.3e-12. Weak tokens stay far under it: "aaaa…ab" has 0.2 bits per
// character.
const lowVariety = 0.55

// EstimateBits estimates the entropy of a random token: its length times
// the bits that a character of its alphabet carries. The alphabet comes from
// the classes of characters it uses. So 32 hex digits estimate at 128 bits.
// When the characters are far less varied than the alphabet allows, the
// estimate is the length times their Shannon entropy instead. That happens
// with few distinct characters, or one used far more than the others.
func EstimateBits(token string) float64 {
	r := []rune(token)
	if len(r) == 0 {
		return 0
	}
	freq := map[rune]int{}
	for _, c := range r {
		freq[c]++
	}
	pool := alphabetSize(token)
	var shannon float64
	n := float64(len(r))
	for _, k := range freq {
		p := float64(k) / n
		shannon -= p * math.Log2(p)
	}
	perChar := math.Log2(float64(pool))
	if shannon < lowVariety*math.Log2(math.Min(n, float64(pool))) {
		perChar = shannon
	}
	return n * perChar
}

// alphabetBits is the bits that a random character of token's alphabet
// carries.
func alphabetBits(token string) float64 { return math.Log2(float64(alphabetSize(token))) }

// alphabetSize is the size of the alphabet that token's characters seem
// drawn from. Hex digits of one case give 16. Otherwise it adds 10 for
// digits, 26 for lower case, 26 for upper case and 33 for anything else.
// It is at least 2.
func alphabetSize(token string) int {
	var lower, upper, digit, other, nonHex bool
	for _, c := range token {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'a' && c <= 'z':
			lower = true
			nonHex = nonHex || c > 'f'
		case c >= 'A' && c <= 'Z':
			upper = true
			nonHex = nonHex || c > 'F'
		case unicode.IsSpace(c):
			other = true
		default:
			other = true
		}
	}
	pool := 0
	switch {
	case !other && !nonHex && !(lower && upper):
		pool = 16 // hexadecimal, one case
	default:
		if digit {
			pool += 10
		}
		if lower {
			pool += 26
		}
		if upper {
			pool += 26
		}
		if other {
			pool += 33
		}
	}
	return max(pool, 2)
}

// MinRandomShare is the least share of its alphabet estimate that a token
// keeps when read as zxcvbn's patterns; see [PatternShare]. Random tokens
// keep most of theirs. zxcvbn finds dates in runs of digits, and short
// words in random letters, but only a few. For 16 random bytes in hex, the
// shortest token hookgate takes, the median is about 0.89. About one draw
// in 10^9 would fall under 0.5. Phrases stay far under it, however long:
// "ThisIsMyVerySecureAdminToken2026!" keeps 0.43.
const MinRandomShare = 0.5

// minPatternLen is the fewest characters of a zxcvbn pattern that
// [PatternShare] counts. Random tokens are full of two-character words and
// sequences, such as "of" and "12", which say nothing of how they were made.
const minPatternLen = 3

// patternChunk is how many bytes of a token zxcvbn reads at a time.
// maxPatternBytes is how many of its first bytes [PatternShare] reads in
// all. zxcvbn's time grows faster than the square of its input's length.
// A token whose first 256 bytes are random enough is long enough.
const (
	patternChunk    = 64
	maxPatternBytes = 256
)

// PatternShare reads token the way a guesser would, and takes the
// cheapest reading. A reading is a sequence of zxcvbn's patterns, such as
// words, names, common passwords, keyboard rows, sequences and dates. Each
// pattern costs the guesses that zxcvbn estimates for it. Between the
// patterns are random characters of the token's alphabet, counted as
// [EstimateBits] does. It returns the reading's bits and their share of
// the bits of the same bytes read as random characters. The share is 1
// with no pattern, and near 0 for words alone. It also returns the kinds of
// pattern used, most characters first. It does not use zxcvbn's own total,
// which charges 10 guesses per random character whatever the alphabet.
func PatternShare(token string) (share, bits float64, kinds []string) {
	text := token
	if len(text) > maxPatternBytes {
		text = text[:maxPatternBytes]
	}
	if text == "" || !utf8.ValidString(text) {
		return 1, 0, nil
	}
	perChar := alphabetBits(token)
	covered := map[string]int{}
	for start := 0; start < len(text); start += patternChunk {
		chunk := text[start:min(start+patternChunk, len(text))]
		b, cov := cheapestReading(chunk, perChar)
		bits += b
		for k, n := range cov {
			covered[k] += n
		}
	}
	for k := range covered {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if covered[a] != covered[b] {
			return covered[b] - covered[a]
		}
		return strings.Compare(a, b)
	})
	return bits / (float64(len(text)) * perChar), bits, kinds
}

// cheapestReading returns the bits of the cheapest reading of text as
// zxcvbn's matches and random characters of perChar bits each, and how
// many bytes each kind of pattern (patternKind) covers in it.
func cheapestReading(text string, perChar float64) (float64, map[string]int) {
	n := len(text)
	byEnd := make([][]*match.Match, n)
	for _, m := range matching.Omnimatch(text, nil) {
		// Indices are of bytes. zxcvbn counts some in runes, so a match
		// whose indices do not frame its token is left out.
		if m.I < 0 || m.J >= n || m.J-m.I+1 < minPatternLen || text[m.I:m.J+1] != m.Token {
			continue
		}
		byEnd[m.J] = append(byEnd[m.J], m)
	}
	best := make([]float64, n+1)
	from := make([]*match.Match, n+1)
	for k := 1; k <= n; k++ {
		best[k] = best[k-1] + perChar
		for _, m := range byEnd[k-1] {
			if c := best[m.I] + math.Log2(scoring.EstimateGuesses(m, text)); c < best[k] {
				best[k], from[k] = c, m
			}
		}
	}
	covered := map[string]int{}
	for k := n; k > 0; {
		m := from[k]
		if m == nil {
			k--
			continue
		}
		covered[patternKind(m)] += k - m.I
		k = m.I
	}
	return best[n], covered
}

// patternKind names the kind of a zxcvbn match for a refusal.
func patternKind(m *match.Match) string {
	switch m.Pattern {
	case "dictionary":
		switch m.DictionaryName {
		case "passwords":
			return "common passwords"
		case "surnames", "male_names", "female_names":
			return "names"
		}
		return "dictionary words"
	case "spatial":
		return "keyboard patterns"
	case "sequence":
		return "sequences (such as abc or 123)"
	case "repeat":
		return "repeats"
	}
	return "dates and years" // date, regex (recent_year)
}

// joinKinds writes kinds as "a", "a and b" or "a, b and c".
func joinKinds(kinds []string) string {
	switch len(kinds) {
	case 0:
		return "patterns"
	case 1:
		return kinds[0]
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
}
