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
// hookgate starts with. With it, guessing is hopeless whatever the rate,
// which is what lets a request with the right token through even when its
// client is limited.
const MinTokenBits = 128

// TokenHint says how to make a good admin token.
const TokenHint = "generate one with: openssl rand -hex 32 (or: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')"

// CheckToken returns why token is too weak to be the admin token, or nil:
// only whitespace, whitespace around it, a repeated pattern (the same run of characters over and
// over, 32 × "a" included), fewer than MinTokenLength characters, fewer
// than MinTokenBits of estimated entropy (EstimateBits), or made mostly of
// what guessers try first: dictionary words, names, common passwords,
// keyboard rows, sequences, repeats and dates (PatternShare under
// MinRandomShare), however long the phrase. The error never contains the
// token, nor any part of it.
func CheckToken(token string) error {
	if strings.TrimSpace(token) == "" {
		return errors.New("admin token: it is only whitespace; " + TokenHint)
	}
	if strings.TrimSpace(token) != token {
		// HTTP drops the whitespace around a header's value: no request
		// could carry this token.
		return errors.New("admin token: it begins or ends with whitespace (a line break from the file or variable it was read from?), which no Authorization header can carry: remove it; " + TokenHint)
	}
	if p := period(token); p > 0 {
		if p == 1 {
			return errors.New("admin token: it is one character repeated; " + TokenHint)
		}
		return fmt.Errorf("admin token: it is a pattern of %d characters repeated; %s", p, TokenHint)
	}
	if n, bits := len([]rune(token)), EstimateBits(token); n < MinTokenLength || bits < MinTokenBits {
		return fmt.Errorf("admin token: it has %d characters and about %d bits of entropy, and must have at least %d and %d, so that it cannot be guessed; %s",
			n, int(bits), MinTokenLength, MinTokenBits, TokenHint)
	}
	if share, pbits, kinds := PatternShare(token); share < MinRandomShare {
		return fmt.Errorf("admin token: it is made mostly of %s, which guessers try first: a password-strength estimator (zxcvbn) puts it at about %d bits, under %d%% of what random characters of its length would have; %s",
			joinKinds(kinds), int(pbits), int(MinRandomShare*100), TokenHint)
	}
	return nil
}

// period returns the length of the run of characters that token repeats
// (token[i] == token[i-p] throughout, at least twice over), or 0 when it
// repeats none.
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

// lowVariety is the share of the most Shannon entropy a token's length and
// alphabet permit under which EstimateBits counts the token's characters
// as too little varied. Random tokens fall under it by chance, and it is
// set so that they practically never do: 16 random bytes in hex (32 draws
// of 16 characters, the shortest token hookgate takes) fall under 0.55 of
// 4 bits with probability 1.3e-12, 32 draws of [a-z0-9] under 0.55 of 5
// bits with 3.4e-14 (summed exactly over the multinomial's count
// patterns). 0.75, used before, refused one `openssl rand -hex 16` in
// 9,400 and one [a-z0-9] token in 1,300. Weak tokens stay far under it:
// "aaaa…ab" has 0.2 bits per character, and four characters eight times
// each have 2 bits, under 0.55 × 4.
const lowVariety = 0.55

// EstimateBits estimates the entropy of a random token: its length times
// the bits a character of its alphabet can carry (from the classes of
// characters it uses: hex digits, digits, lower case, upper case, other),
// so 32 hex digits (16 random bytes) estimate at 128 bits and 64 at 256.
// When its characters are far less varied than such an alphabet allows
// (their Shannon entropy under lowVariety of the most its length and
// alphabet permit: few distinct characters, or one used far more than the
// others, as in "aaaa…ab"), the estimate is its length times that Shannon
// entropy instead.
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

// alphabetBits is the bits a random character of token's alphabet carries
// (alphabetSize).
func alphabetBits(token string) float64 { return math.Log2(float64(alphabetSize(token))) }

// alphabetSize is the size of the alphabet token's characters appear to be
// drawn from, from the classes of characters it uses: 16 for hexadecimal
// digits of one case, else 10 for digits, 26 for lower case, 26 for upper
// case and 33 for anything else, added up (at least 2).
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
// keeps when it is read as zxcvbn's patterns (PatternShare). Random tokens
// keep most of theirs: zxcvbn finds dates in runs of digits, short words
// and l33t spellings in random letters, but only ever a few. Measured on
// 200,000 draws of 16 random bytes in hex (openssl rand -hex 16, the
// shortest token hookgate takes): a median of 0.886, one in 1,000 under
// 0.695, one in 10,000 under 0.657, the lowest 0.593, a tail that falls
// like a normal distribution's of σ 0.062 to 0.066, under which about one
// draw in 10^9 would fall under 0.5. On 20,000 draws each, 24 random bytes
// in base64 keep a median of 0.94 (lowest 0.70), 24 and 32 bytes in hex
// (make run's, openssl rand -hex 32's) a median of 0.88 (lowest 0.69) and
// more. Phrases stay far under it, however long:
// "ThisIsMyVerySecureAdminToken2026!" keeps 0.43, sentences of 53
// characters 0.35 to 0.39, "abcdefghijklmnopqrstuvwxyz012345" 0.08.
const MinRandomShare = 0.5

// minPatternLen is the fewest characters of a zxcvbn pattern that
// PatternShare counts: random tokens are full of two-character "words"
// and sequences ("of", "12"), which say nothing of how they were made.
const minPatternLen = 3

// patternChunk is how many bytes of a token zxcvbn reads at a time, and
// maxPatternBytes how many of its first bytes PatternShare reads in all:
// zxcvbn's matching takes time that grows faster than the square of its
// input's length (about 20 ms for 64 characters, 2 s for 256), and a
// token whose first 256 bytes are random enough is long enough.
const (
	patternChunk    = 64
	maxPatternBytes = 256
)

// PatternShare reads token (at most its first maxPatternBytes bytes) the
// way a guesser would: as a sequence of the patterns of the zxcvbn
// password-strength estimator (github.com/trustelem/zxcvbn: dictionary
// words, names, common passwords, l33t spellings, keyboard rows,
// sequences, repeats, dates) of at least minPatternLen characters, each
// costing the guesses zxcvbn estimates for it, and random characters of
// the token's alphabet (as EstimateBits counts them) between them, the
// cheapest such reading. It returns that reading's bits, their share of
// the bits of the same bytes read as random characters only (1 for a
// token with no pattern; near 0 for one of words alone), and the kinds of
// pattern the reading uses, most characters first. (zxcvbn's own total
// charges 10 guesses per random character, whatever the alphabet, so a
// random base64 token of 32 characters would count only 106 bits.)
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
		// Indices are of bytes; a match whose indices do not frame its
		// token (zxcvbn counts some in runes) is left out.
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
