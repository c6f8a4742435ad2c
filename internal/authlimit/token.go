package authlimit

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
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
// only whitespace, a repeated pattern (the same run of characters over and
// over, 32 × "a" included), fewer than MinTokenLength characters, or fewer
// than MinTokenBits of estimated entropy (EstimateBits). The error never
// contains the token.
func CheckToken(token string) error {
	if strings.TrimSpace(token) == "" {
		return errors.New("admin token: it is only whitespace; " + TokenHint)
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
	var lower, upper, digit, other, nonHex bool
	freq := map[rune]int{}
	for _, c := range r {
		freq[c]++
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
	if pool < 2 {
		pool = 2
	}
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
