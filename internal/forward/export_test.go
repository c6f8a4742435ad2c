package forward

// Looks returns how many of Run's rounds ended in a wait: a test knows by it
// that the relay has looked and is waiting.
func (r *Relay) Looks() int64 { return r.looks.Load() }
