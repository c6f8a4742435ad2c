package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// summary collects the phases' results for the final table and checks.
type summary struct {
	o               *options
	roundTrips      *roundTripCounts
	first, replay   *loadResult
	firstCPU        time.Duration // gateway + PostgreSQL CPU time per first delivery (phase 1)
	lone            *loadResult   // first deliveries at concurrency 1
	firstBatches    string        // the batches of the first-delivery phase
	pgbench         []*pgbenchResult
	forward         []*forwardResult
	forwardSkipped  string
	precreateErrors int
	rssOverallMB    float64
	sqlFirstOK      bool
	sqlReplayOK     bool
	shutdownErr     error
}

func (s *summary) pgbenchOf(m pgbenchMode) *pgbenchResult {
	for _, r := range s.pgbench {
		if r.mode.name == m.name {
			return r
		}
	}
	return nil
}

func (s *summary) forwardOf(role string) *forwardResult {
	for _, r := range s.forward {
		if r.role == role {
			return r
		}
	}
	return nil
}

// ratio formats a/b as "0.63×", or "—" when b is not positive.
func ratio(a, b float64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// ratioCheck decides a check of rate ÷ ref ≥ need, where other processes'
// load may have lowered either side: a disturbed measured phase can only
// hide a pass, a disturbed reference phase only a fail. It returns the
// verdict and whether it is conclusive.
func ratioCheck(rate, ref, need float64, rateCPU, refCPU cpuUse) (pass, conclusive bool) {
	pass = rate/ref >= need
	rateDisturbed := rateCPU.otherLoad() > disturbedAbove
	refDisturbed := refCPU.otherLoad() > disturbedAbove
	return pass, !((rateDisturbed && !pass) || (refDisturbed && pass))
}

// print writes the table and the checks; it returns true when a check failed
// or could not be decided.
func (s *summary) print(out io.Writer) (failed bool) {
	inconclusive := false
	fmt.Fprintln(out)
	fmt.Fprintln(out, "== summary")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\trate/s\tp50\tp99\terrors\t÷ pgbench plain SQL\t÷ pgbench pipeline\t÷ first delivery\t")
	plainRef := s.pgbenchOf(modePlain)
	pipe := s.pgbenchOf(modePipeline)
	replayRef := s.pgbenchOf(modeReplay)
	tps := func(r *pgbenchResult) float64 {
		if r == nil {
			return 0
		}
		return r.tps
	}
	firstRate := 0.0
	if s.first != nil {
		firstRate = s.first.rate()
	}
	row := func(name string, rate float64, p50, p99 string, errs int, cols ...string) {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%s\t\n", name, rate, p50, p99, errs, strings.Join(cols, "\t"))
	}
	if s.first != nil {
		row(s.first.name, s.first.rate(), ms(s.first.p(.5)), ms(s.first.p(.99)), s.first.errors, ratio(s.first.rate(), tps(plainRef)), ratio(s.first.rate(), tps(pipe)), "—")
	}
	if plainRef != nil {
		row(plainRef.mode.name, plainRef.tps, ms(plainRef.p(.5)), ms(plainRef.p(.99)), plainRef.failed, "—", ratio(plainRef.tps, tps(pipe)), ratio(plainRef.tps, firstRate))
	}
	if pipe != nil {
		row(pipe.mode.name, pipe.tps, ms(pipe.p(.5)), ms(pipe.p(.99)), pipe.failed, ratio(pipe.tps, tps(plainRef)), "—", ratio(pipe.tps, firstRate))
	}
	if s.replay != nil {
		row(s.replay.name, s.replay.rate(), ms(s.replay.p(.5)), ms(s.replay.p(.99)), s.replay.errors+s.precreateErrors, "—", ratio(s.replay.rate(), tps(replayRef)), ratio(s.replay.rate(), firstRate))
	}
	if replayRef != nil {
		row(replayRef.mode.name, replayRef.tps, ms(replayRef.p(.5)), ms(replayRef.p(.99)), replayRef.failed, "—", "—", ratio(replayRef.tps, firstRate))
	}
	for _, f := range s.forward {
		l := f.load
		row(l.name, l.rate(), ms(l.p(.5)), ms(l.p(.99)), l.errors, "—", "—", ratio(l.rate(), firstRate))
	}
	tw.Flush()
	if s.firstBatches != "" {
		fmt.Fprintf(out, "first deliveries' batches: %s\n", s.firstBatches)
	}
	if s.lone != nil {
		fmt.Fprintf(out, "a lone sender (concurrency 1): %.0f deliveries/s, p50 %s, p99 %s\n", s.lone.rate(), ms(s.lone.p(.5)), ms(s.lone.p(.99)))
	}

	fmt.Fprintln(out)
	check := func(ok bool, format string, args ...any) {
		verdict := "PASS"
		if !ok {
			verdict, failed = "FAIL", true
		}
		fmt.Fprintf(out, "  %-4s  %s\n", verdict, fmt.Sprintf(format, args...))
	}
	unsure := func(msg string, measured, ref cpuUse, measuredName, refName string) {
		fmt.Fprintf(out, "  ????  %s: other processes used %.2f (%s) and %.2f (%s) cores; rerun on an idle machine\n",
			msg, measured.otherLoad(), measuredName, ref.otherLoad(), refName)
		inconclusive = true
	}
	fmt.Fprintln(out, "checks:")
	if rt := s.roundTrips; rt != nil {
		check(rt.first == 1 && rt.replay == 1 && rt.firstAfterReplay == 1 && rt.mismatch == 1 && rt.forward == 1 && rt.reprepared == 0,
			"round trips per delivery: first %.1f, replay %.1f, first after a replay %.1f, payload mismatch %.1f, first with one forward target %.1f (each must be 1); statements prepared again: %d (must be 0)",
			rt.first, rt.replay, rt.firstAfterReplay, rt.mismatch, rt.forward, rt.reprepared)
	}
	if s.first != nil && plainRef != nil && plainRef.tps > 0 {
		msg := fmt.Sprintf("first delivery: gateway %.0f/s ÷ pgbench sending the minimal plain SQL for the same rows %.0f tps = %.2f (need ≥ %.2f)",
			s.first.rate(), plainRef.tps, s.first.rate()/plainRef.tps, s.o.minRatio)
		if pass, ok := ratioCheck(s.first.rate(), plainRef.tps, s.o.minRatio, s.first.cpu, plainRef.cpu); ok {
			check(pass, "%s", msg)
		} else {
			unsure(msg, s.first.cpu, plainRef.cpu, "gateway phase", "pgbench phase")
		}
		if pipe != nil && pipe.tps > 0 {
			fmt.Fprintf(out, "  info  first delivery: gateway %.0f/s ÷ pgbench sending the gateway's own pipeline %.0f tps = %.2f; that pipeline ÷ the plain SQL = %.2f\n",
				s.first.rate(), pipe.tps, s.first.rate()/pipe.tps, pipe.tps/plainRef.tps)
		}
	} else {
		fmt.Fprintln(out, "  ----  first delivery: ratio to pgbench not measured (-skip-pgbench)")
	}
	if s.first != nil {
		check(s.first.p(.99) < s.o.maxP99, "first delivery: p99 %s at concurrency %d (need < %s)", ms(s.first.p(.99)), s.o.concurrency, ms(s.o.maxP99))
	}
	if s.replay != nil && s.first != nil && s.first.rate() > 0 {
		msg := fmt.Sprintf("replay: gateway %.0f/s ÷ first deliveries %.0f/s = %.2f (need ≥ %.2f)",
			s.replay.rate(), s.first.rate(), s.replay.rate()/s.first.rate(), s.o.minReplayRatio)
		if pass, ok := ratioCheck(s.replay.rate(), s.first.rate(), s.o.minReplayRatio, s.replay.cpu, s.first.cpu); ok {
			check(pass, "%s", msg)
		} else {
			unsure(msg, s.replay.cpu, s.first.cpu, "replay phase", "first-delivery phase")
		}
	}
	if s.first != nil {
		check(s.first.errors == 0 && s.first.count > 0, "first delivery: %d errors in %d requests", s.first.errors, s.first.requests)
	}
	if s.replay != nil {
		check(s.replay.errors == 0 && s.precreateErrors == 0 && s.replay.count > 0,
			"replay: %d errors in %d requests (each must be 202 with Idempotent-Replayed: true), %d creating the keys",
			s.replay.errors, s.replay.requests, s.precreateErrors)
	}
	s.printForwardChecks(out, check, unsure)

	var peak float64
	for _, r := range s.loads() {
		peak = max(peak, r.rssPeakMB)
	}
	check(peak > 0 && peak <= s.o.maxRSSMB, "server peak RSS under load %.1f MB (limit %.0f MB; %.1f MB over the first server's whole run)",
		peak, s.o.maxRSSMB, s.rssOverallMB)
	if len(s.pgbench) > 0 {
		check(s.sqlFirstOK && (s.sqlReplayOK || s.replay == nil), "pgbench runs the statements the gateway's connections ran (pg_stat_activity)")
	}
	check(s.shutdownErr == nil, "server stopped cleanly on SIGTERM%s", errSuffix(s.shutdownErr))
	for _, f := range s.forward {
		check(f.shutdownErr == nil, "server (--role %s, one forward target) stopped cleanly on SIGTERM%s", f.role, errSuffix(f.shutdownErr))
	}
	var disturbed []string
	for _, r := range s.loads() {
		if r.cpu.otherLoad() > disturbedAbove {
			disturbed = append(disturbed, fmt.Sprintf("%s (%.2f cores)", r.name, r.cpu.otherLoad()))
		}
	}
	for _, r := range s.pgbench {
		if r.cpu.otherLoad() > disturbedAbove {
			disturbed = append(disturbed, fmt.Sprintf("%s (%.2f cores)", r.mode.name, r.cpu.otherLoad()))
		}
	}
	if len(disturbed) > 0 {
		fmt.Fprintf(out, "  NOTE  other processes loaded the machine during: %s\n", strings.Join(disturbed, ", "))
	}
	switch {
	case failed:
		fmt.Fprintln(out, "result: FAIL")
	case inconclusive:
		fmt.Fprintln(out, "result: INCONCLUSIVE (the machine was not idle)")
	default:
		fmt.Fprintln(out, "result: PASS")
	}
	return failed || inconclusive
}

// printForwardChecks prints the checks of the forwarding phases.
func (s *summary) printForwardChecks(out io.Writer, check func(bool, string, ...any), unsure func(string, cpuUse, cpuUse, string, string)) {
	if s.o.skipForward {
		fmt.Fprintln(out, "  ----  forwarding: not measured (-skip-forward)")
		return
	}
	if s.forwardSkipped != "" {
		fmt.Fprintf(out, "  ----  forwarding: not measured (%s)\n", s.forwardSkipped)
		return
	}
	api, all := s.forwardOf("api"), s.forwardOf("all")
	// ratio checks a forwarding phase's intake against phase 1's.
	ratio := func(r *forwardResult, what string, min float64) {
		if r == nil || s.first == nil || s.first.rate() <= 0 {
			return
		}
		ref := s.first.rate()
		msg := fmt.Sprintf("forwarding: %s %.0f/s ÷ without a target %.0f/s = %.2f (need ≥ %.2f)",
			what, r.load.rate(), ref, r.load.rate()/ref, min)
		if pass, ok := ratioCheck(r.load.rate(), ref, min, r.load.cpu, s.first.cpu); ok {
			check(pass, "%s", msg)
		} else {
			unsure(msg, r.load.cpu, s.first.cpu, "--role "+r.role+" phase", "no-target phase")
		}
	}
	ratio(api, "first delivery with one forward target, --role api", s.o.minForwardRatio)
	ratio(all, "--role all (the same process also relays and works the forwards)", s.o.minForwardAllRatio)
	if all != nil && s.first != nil && s.first.rate() > 0 {
		check(all.drained, "forwarding, --role all: the sink received %d of %d accepted events within %s of the load's end",
			all.received, all.accepted, all.drainWait.Round(10*time.Millisecond))
		if len(all.lags100) > 0 {
			p50, p99 := percentile(all.lags100, .5), percentile(all.lags100, .99)
			check(p50 <= 5*time.Millisecond && p99 <= 50*time.Millisecond,
				"forwarding, --role all, at 100 deliveries/s: from the 2xx to the target's receipt p50 %s (need ≤ 5 ms), p99 %s (need ≤ 50 ms)", ms(p50), ms(p99))
		}
		if len(all.lagsHalf) > 0 {
			p99 := percentile(all.lagsHalf, .99)
			check(p99 <= 100*time.Millisecond,
				"forwarding, --role all, at half the intake (%.0f/s): from the 2xx to the target's receipt p99 %s (need ≤ 100 ms)", all.lagRate, ms(p99))
		}
		if all.cpuPerForward != 0 {
			check(all.cpuPerForward <= s.o.maxCPUPerForward, "forwarding, --role all: CPU per forward (gateway + PostgreSQL) %d µs (need ≤ %d µs)",
				all.cpuPerForward.Microseconds(), s.o.maxCPUPerForward.Microseconds())
		}
	}
	for _, f := range s.forward {
		check(f.load.errors == 0 && f.load.count > 0, "forwarding, --role %s: %d errors in %d requests", f.role, f.load.errors, f.load.requests)
		check(f.jobs == f.accepted && f.accepted > 0, "forwarding, --role %s: %d forward jobs for %d accepted events (one per event: %s)", f.role, f.jobs, f.accepted, f.jobStates)
	}
}

// loads returns the gateway phases measured.
func (s *summary) loads() []*loadResult {
	var out []*loadResult
	for _, r := range []*loadResult{s.first, s.replay} {
		if r != nil {
			out = append(out, r)
		}
	}
	for _, f := range s.forward {
		out = append(out, f.load)
	}
	return out
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + strings.TrimSpace(err.Error())
}
