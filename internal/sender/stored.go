package sender

import (
	"bytes"
	"mime"
	"net/url"
	"slices"

	"github.com/hookgate/hookgate/internal/jsonptr"
)

// StoredBody returns the body as hookgate keeps it: body (as received, or
// decompressed), less the signature the sender's provider puts inside it
// (config.PresetSignature.SignatureObject, Mailgun's "signature" member,
// from a JSON body; SignatureFields from a form body), so that no stored
// event, view or forward holds a signature anyone could send again. The
// rest is kept byte for byte (jsonptr.RemoveMember). For every other
// sender, and a body without such a member (or one that is not the JSON
// object or the form it should be), it returns body itself. contentType is
// the request's Content-Type. The signature must have been checked on the
// body as received: StoredBody is for what comes after (the delivery ID
// taken from its SHA-256, the request's hash, the event, the forwards).
func (s *Sender) StoredBody(body []byte, contentType string) []byte {
	if s.sigObject == "" {
		return body
	}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "application/x-www-form-urlencoded" {
		return removeFormFields(body, s.sigFields)
	}
	out, _ := jsonptr.RemoveMember(body, s.sigObject)
	return out
}

// removeFormFields returns the form body without its fields named names
// (their names decoded as url.ParseQuery decodes them); the other fields
// are kept as sent, in order. A body without them comes back as it is.
func removeFormFields(body []byte, names []string) []byte {
	out := make([]byte, 0, len(body))
	kept, removed := 0, false
	for part := range bytes.SplitSeq(body, []byte("&")) {
		name, _, _ := bytes.Cut(part, []byte("="))
		if n, err := url.QueryUnescape(string(name)); err == nil && slices.Contains(names, n) {
			removed = true
			continue
		}
		if kept > 0 {
			out = append(out, '&')
		}
		out = append(out, part...)
		kept++
	}
	if !removed {
		return body
	}
	return out
}
