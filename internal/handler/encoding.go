package handler

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookgate/hookgate/internal/sender"
)

// contentEncoding returns whether the request's body is gzip-compressed,
// which only a sender with accept_encodings: [gzip] accepts. A body in any
// other Content-Encoding (or several layered) is a 415 problem, with an
// Accept-Encoding header naming what the sender accepts (RFC 7694).
// "identity" is no encoding.
func contentEncoding(w http.ResponseWriter, r *http.Request, sender *sender.Sender) (gzipped bool, err error) {
	var codings []string
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return false, nil
	}
	accepted := sender.AcceptsEncoding("gzip")
	if len(codings) == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip") && accepted {
		return true, nil
	}
	if accepted {
		w.Header().Set("Accept-Encoding", "gzip")
		return false, newProblem(probUnsupportedEncoding, fmt.Sprintf(
			"Sender %q accepts bodies without Content-Encoding or in gzip only; this one is in %s. Nothing was recorded.", sender.Name, quote(strings.Join(codings, ", "))))
	}
	w.Header().Set("Accept-Encoding", "identity")
	return false, newProblem(probUnsupportedEncoding, fmt.Sprintf(
		"Sender %q accepts bodies without Content-Encoding only; this one is in %s (accept_encodings: [gzip] in the sender's configuration accepts gzip). Nothing was recorded.", sender.Name, quote(strings.Join(codings, ", "))))
}

// gunzip decompresses body as a stream, reading at most limit bytes of
// output: a body that inflates to more is a 413 problem, found without ever
// holding more than limit+1 bytes of it (a gzip bomb costs no more than a
// body at the limit), each step of its output buffer counted in h. A body
// that is not valid gzip is a 400 problem.
func gunzip(body []byte, limit int64, h *bodyHold) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, &problemError{typ: probInvalidBody, detail: "The body is not valid gzip, as its Content-Encoding says. Nothing was recorded.", cause: err}
	}
	out, err := h.readAll(zr, int64(len(body)), -1, limit, nil)
	var pe *problemError
	if errors.As(err, &pe) {
		return nil, pe
	}
	if err != nil {
		return nil, &problemError{typ: probInvalidBody, detail: "The body is not valid gzip, as its Content-Encoding says. Nothing was recorded.", cause: err}
	}
	if int64(len(out)) > limit {
		return nil, newProblem(probTooLarge, fmt.Sprintf("The body inflates to more than this sender's limit of %d bytes (the limit applies to the decompressed body). Nothing was recorded.", limit))
	}
	return out, nil
}
