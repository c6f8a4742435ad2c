package sender

import (
	"bytes"
	"mime"
	"net/url"
	"slices"

	"github.com/hookgate/hookgate/internal/jsonptr"
)

// StoredBody returns the body as hookgate keeps it: without the signature
// the provider puts inside it, such as Mailgun's "signature" member or form
// fields. So no stored event, view or forward holds a signature anyone
// could send again. The rest is kept byte for byte. A body without that
// signature, or of another sender, comes back as it is. contentType is the
// request's Content-Type. Check the signature on the body as received
// first.
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

// removeFormFields returns the form body without the fields named names,
// decoded as [url.ParseQuery] decodes them. The other fields are kept as
// sent, in order. A body without them comes back as it is.
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
