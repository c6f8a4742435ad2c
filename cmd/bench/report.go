package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// summary collects the phases' results for the checks.
type summary struct {
	o               *options
	first, replay   *loadResult
	pgbench         *pgbenchResult
	goBench         []goBench
	forward         []*forwardResult
	precreateErrors int
	rssOverall      float64
	shutdownErr     error
}

// ratioCheck decides rate ÷ ref ≥ need, where other processes' load may
// have lowered either side: a disturbed measured phase can only hide a
// pass, a disturbed reference phase only a fail. It returns the verdict
// and whether it is conclusive.
func ratioCheck(rate, ref, need float64, rateCPU, refCPU cpuUse) (pass, conclusive bool) {
	pass = rate/ref >= need
	return pass, !(rateCPU.otherLoad() > disturbedAbove && !pass || refCPU.otherLoad() > disturbedAbove && pass)
}

// print writes the checks; it returns true when one failed or could not be
// decided.
func (s *summary) print(out io.Writer) (failed bool) {
	first := s.first
	if first == nil {
		first = &loadResult{}
	}
	inconclusive := false
	check := func(ok bool, format string, args ...any) {
		verdict := "PASS"
		if !ok {
			verdict, failed = "FAIL", true
		}
		fmt.Fprintf(out, "  %-4s  %s\n", verdict, fmt.Sprintf(format, args...))
	}
	// checkRatio checks rate ÷ ref ≥ need (what formats rate and ref), or
	// says that other processes' load could have decided it.
	checkRatio := func(what string, rate, ref, need float64, rateCPU, refCPU cpuUse, rateName, refName string) {
		msg := fmt.Sprintf(what+" = %.2f (need ≥ %.2f)", rate, ref, rate/ref, need)
		if pass, ok := ratioCheck(rate, ref, need, rateCPU, refCPU); ok {
			check(pass, "%s", msg)
			return
		}
		fmt.Fprintf(out, "  ????  %s: other processes used %.2f (%s) and %.2f (%s) cores; rerun on an idle machine\n",
			msg, rateCPU.otherLoad(), rateName, refCPU.otherLoad(), refName)
		inconclusive = true
	}
	fmt.Fprintln(out, "\n== checks")
	if pg := s.pgbench; s.first != nil && pg != nil && pg.tps > 0 {
		checkRatio("first delivery: gateway %.0f/s ÷ pgbench sending the minimal plain SQL for the same rows %.0f tps", first.rate(), pg.tps, s.o.minRatio,
			first.cpu, pg.cpu, "gateway phase", "pgbench phase")
		for _, g := range s.goBench[:min(1, len(s.goBench))] {
			fmt.Fprintf(out, "  info  first delivery: gateway %.0f/s ÷ its own pipeline without HTTP, one delivery per transaction (BenchmarkRun/first) %.0f/s = %.2f; that pipeline ÷ the plain SQL = %.2f\n",
				first.rate(), g.rate, first.rate()/g.rate, g.rate/pg.tps)
		}
	} else {
		fmt.Fprintln(out, "  ----  first delivery: ratio to pgbench not measured (-skip-pgbench)")
	}
	if s.first != nil {
		check(first.p(.99) < s.o.maxP99, "first delivery: p99 %s at concurrency %d (need < %s)", ms(first.p(.99)), s.o.concurrency, ms(s.o.maxP99))
		check(first.errors == 0 && first.count > 0, "first delivery: %d errors in %d requests", first.errors, first.requests)
	}
	if l := s.replay; l != nil && first.rate() > 0 {
		checkRatio("replay: gateway %.0f/s ÷ first deliveries %.0f/s", l.rate(), first.rate(), s.o.minReplayRatio, l.cpu, first.cpu, "replay phase", "first-delivery phase")
		check(l.errors == 0 && s.precreateErrors == 0 && l.count > 0,
			"replay: %d errors in %d requests (each must be 202 with Idempotent-Replayed: true), %d creating the keys", l.errors, l.requests, s.precreateErrors)
	}
	if s.o.skipForward {
		fmt.Fprintln(out, "  ----  forwarding: not measured (-skip-forward)")
	}
	for _, f := range s.forward {
		what, need := "first delivery with one forward target, --role api", s.o.minForwardRatio
		if f.role == "all" {
			what, need = "--role all (the same process also relays and works the forwards)", s.o.minForwardAllRatio
		}
		if first.rate() > 0 {
			checkRatio("forwarding: "+what+" %.0f/s ÷ without a target %.0f/s", f.load.rate(), first.rate(), need, f.load.cpu, first.cpu, "--role "+f.role+" phase", "no-target phase")
		}
		if f.role == "all" {
			check(f.drained, "forwarding, --role all: the sink received %d of %d accepted events within %s of the load's end",
				f.received, f.accepted, f.drainWait.Round(10*time.Millisecond))
			if len(f.lags100) > 0 {
				p50, p99 := percentile(f.lags100, .5), percentile(f.lags100, .99)
				check(p50 <= 5*time.Millisecond && p99 <= 50*time.Millisecond,
					"forwarding, --role all, at 100 deliveries/s: from the 2xx to the target's receipt p50 %s (need ≤ 5 ms), p99 %s (need ≤ 50 ms)", ms(p50), ms(p99))
			}
			if len(f.lagsHalf) > 0 {
				check(percentile(f.lagsHalf, .99) <= 100*time.Millisecond,
					"forwarding, --role all, at half the intake (%.0f/s): from the 2xx to the target's receipt p99 %s (need ≤ 100 ms)", f.lagRate, ms(percentile(f.lagsHalf, .99)))
			}
			if f.cpuPerForward != 0 {
				check(f.cpuPerForward <= s.o.maxCPUPerForward, "forwarding, --role all: CPU per forward (gateway + PostgreSQL) %d µs (need ≤ %d µs)",
					f.cpuPerForward.Microseconds(), s.o.maxCPUPerForward.Microseconds())
			}
		}
		check(f.load.errors == 0 && f.load.count > 0, "forwarding, --role %s: %d errors in %d requests", f.role, f.load.errors, f.load.requests)
		check(f.forwards.total() == f.expected && f.expected > 0, "forwarding, --role %s: %d forwards for %d accepted deliveries (one each: %s)",
			f.role, f.forwards.total(), f.expected, f.forwards)
	}
	peak, disturbed := 0.0, []string{}
	for _, l := range append([]*loadResult{s.first, s.replay}, s.forwardLoads()...) {
		if l != nil {
			if peak = max(peak, l.rssPeak); l.cpu.otherLoad() > disturbedAbove {
				disturbed = append(disturbed, fmt.Sprintf("%s (%.2f cores)", l.name, l.cpu.otherLoad()))
			}
		}
	}
	if s.pgbench != nil && s.pgbench.cpu.otherLoad() > disturbedAbove {
		disturbed = append(disturbed, fmt.Sprintf("%s (%.2f cores)", pgbenchName, s.pgbench.cpu.otherLoad()))
	}
	check(peak > 0 && peak <= s.o.maxRSS, "server peak RSS %.1f MB (limit %.0f MB; %.1f MB for the first server)", peak, s.o.maxRSS, s.rssOverall)
	check(s.shutdownErr == nil, "server stopped cleanly on SIGTERM%s", errSuffix(s.shutdownErr))
	for _, f := range s.forward {
		check(f.shutdownErr == nil, "server (--role %s, one forward target) stopped cleanly on SIGTERM%s", f.role, errSuffix(f.shutdownErr))
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

func (s *summary) forwardLoads() (l []*loadResult) {
	for _, f := range s.forward {
		l = append(l, f.load)
	}
	return l
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + strings.TrimSpace(err.Error())
}
