package jsonptr

// RemoveMember returns doc, a JSON document whose value is an object,
// without that object's members named name (every one, if the name occurs
// more than once: which one a reader takes differs between readers), and
// true when it removed any. Everything else is kept byte for byte: the
// other members, the white space around and between them, and the comma
// that separated each removed member from the next (or, for the last
// member, from the one before). A document that is not valid JSON, whose
// value is not an object, or that has no such member comes back unchanged
// (the same slice) with false. The result is a new slice; doc is not
// modified.
func RemoveMember(doc []byte, name string) ([]byte, bool) {
	x := extractor{doc: doc}
	x.skipSpace()
	if x.pos >= len(doc) || doc[x.pos] != '{' {
		return doc, false
	}
	// The members' spans: from the opening quote of the name to the end of
	// the value.
	type span struct {
		start, end int
		drop       bool
	}
	var members []span
	dropped := false
	x.pos++ // {
	x.skipSpace()
	if x.pos < len(doc) && doc[x.pos] == '}' {
		return doc, false
	}
	for {
		if x.pos >= len(doc) || doc[x.pos] != '"' {
			return doc, false
		}
		start := x.pos
		end, escaped, err := x.scanString()
		if err != nil {
			return doc, false
		}
		key := unquote(doc[start+1:end-1], escaped, x.scratch[:0])
		x.scratch = key
		drop := string(key) == name
		x.skipSpace()
		if x.pos >= len(doc) || doc[x.pos] != ':' {
			return doc, false
		}
		x.pos++
		x.skipSpace()
		if err := x.value(0, 1); err != nil {
			return doc, false
		}
		members = append(members, span{start, x.pos, drop})
		dropped = dropped || drop
		x.skipSpace()
		if x.pos >= len(doc) {
			return doc, false
		}
		if doc[x.pos] == '}' {
			x.pos++
			break
		}
		if doc[x.pos] != ',' {
			return doc, false
		}
		x.pos++
		x.skipSpace()
	}
	x.skipSpace()
	if x.pos != len(doc) || !dropped {
		return doc, false
	}
	out := make([]byte, 0, len(doc))
	out = append(out, doc[:members[0].start]...) // "{" and the space after it
	first := true
	for i, m := range members {
		if m.drop {
			continue
		}
		if !first {
			// The separator before m as it was: the comma and the space
			// around it.
			out = append(out, doc[members[i-1].end:m.start]...)
		}
		out = append(out, doc[m.start:m.end]...)
		first = false
	}
	return append(out, doc[members[len(members)-1].end:]...), true // the space before "}", "}" and after
}
