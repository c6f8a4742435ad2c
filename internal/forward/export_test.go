package forward

// Looks returns how many of Run's rounds ended in a wait: a test knows by it
// that the relay has looked and is waiting.
func (r *Relay) Looks() int64 { return r.looks.Load() }

// SetTransport makes w, and the fast path that shares it, send every
// forward through t instead of HTTP. Call it before w is used.
func (w *Worker) SetTransport(t Transport) { w.transport = t }
