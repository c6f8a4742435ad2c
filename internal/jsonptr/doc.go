// Package jsonptr resolves RFC 6901 JSON pointers in a request body.
// [ParsePointer] checks a pointer's syntax. [Extract] is a streaming scanner
// that resolves several pointers in one pass over a document. It validates
// the document as it goes, with memory bounded whatever its shape. Ingest
// reads a delivery's ID, event type and match conditions with it. The
// configuration checks pointers' syntax with it.
package jsonptr
