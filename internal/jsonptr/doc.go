// Package jsonptr resolves JSON pointers (RFC 6901) in a request body: a
// pointer's syntax (ParsePointer), and a streaming scanner (Extract) that
// resolves several pointers in one pass over a document, validating it as
// it goes, with memory bounded whatever the document's shape. Ingest reads
// a delivery's ID, event type and match conditions with it
// (internal/sender); configuration checks pointers' syntax with it.
package jsonptr
