package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// procFS is /proc; without it no CPU use or RSS is reported.
var procFS, _ = procfs.NewDefaultFS()

// cpuSnap is the CPU time, in seconds, used so far by the processes the
// report tells apart, by every other one, and by the machine.
type cpuSnap struct {
	at                                       time.Time
	server, postgres, self, busy, irq, total float64 // postgres: the postmaster and its children, live or reaped
	others                                   map[int]float64
	comm                                     map[int]string // of others; "" for kernel threads
}

// takeCPU snapshots the CPU times; pgPID is the postmaster's (0: unknown).
func takeCPU(serverPID, pgPID int) cpuSnap {
	s := cpuSnap{at: time.Now(), others: map[int]float64{}, comm: map[int]string{}}
	procs, _ := procFS.AllProcs()
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || p.PID == os.Getpid() {
			continue
		}
		all := st.CPUTime() + float64(st.CUTime+st.CSTime)/100 // USER_HZ
		switch {
		case p.PID == serverPID:
			s.server = st.CPUTime()
		case pgPID > 0 && (p.PID == pgPID || st.PPID == pgPID):
			s.postgres += all
		default:
			s.others[p.PID] = all
			if s.comm[p.PID] = st.Comm; st.PPID == 2 || p.PID == 2 {
				s.comm[p.PID] = ""
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if st, err := procFS.Stat(); err == nil {
		c := st.CPUTotal // guest time is in user and nice already
		s.busy, s.irq = c.User+c.Nice+c.System+c.IRQ+c.SoftIRQ+c.Steal, c.IRQ+c.SoftIRQ
		s.total = s.busy + c.Idle + c.Iowait
	}
	return s
}

// gatewayPGTime returns the CPU time of the gateway and PostgreSQL
// between a and b.
func gatewayPGTime(a, b cpuSnap) time.Duration {
	return time.Duration((b.server - a.server + b.postgres - a.postgres) * float64(time.Second))
}

// cpuUse is the CPU used between two snapshots, in cores (1.0: one core
// busy for the whole interval).
type cpuUse struct {
	server, loadgen, postgres, pgbench, irq, kthreads, machine, cores float64
	others                                                            float64 // processes outside the measurement
	topOthers                                                         string  // which (a hint: reaped children count whole)
	ok, isPgbench                                                     bool
}

// cpuBetween returns the use between a and b; pgbench is a pgbench
// process's CPU time in the interval, or nil.
func cpuBetween(a, b cpuSnap, pgbench *time.Duration) cpuUse {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return cpuUse{}
	}
	u := cpuUse{server: (b.server - a.server) / secs, loadgen: (b.self - a.self) / secs, postgres: (b.postgres - a.postgres) / secs,
		irq: (b.irq - a.irq) / secs, machine: (b.busy - a.busy) / secs, cores: (b.total - a.total) / secs, ok: true}
	if pgbench != nil {
		u.pgbench, u.isPgbench = pgbench.Seconds()/secs, true
	}
	byComm := map[string]float64{}
	for pid, t := range b.others {
		if d := (t - a.others[pid]) / secs; d > 0 && b.comm[pid] == "" { // a process started since a counts whole
			u.kthreads += d
		} else if d > 0 {
			byComm[b.comm[pid]] += d
		}
	}
	var top []string
	for c, v := range byComm {
		if v >= 0.01 {
			top = append(top, c)
		}
	}
	slices.SortFunc(top, func(x, y string) int { return cmp.Compare(byComm[y], byComm[x]) })
	for i, c := range top[:min(3, len(top))] {
		top[i] = fmt.Sprintf("%s %.2f", c, byComm[c])
	}
	u.topOthers = strings.Join(top[:min(3, len(top))], ", ")
	// Other processes are what the machine did beyond what is accounted
	// for (summing their deltas would overstate: a process that reaps a
	// long-running child gains its whole lifetime at once).
	u.others = max(u.machine-u.server-u.loadgen-u.postgres-u.pgbench-u.irq-u.kthreads, 0)
	return u
}

// String formats u as "gateway 0.81, load generator 0.32, …".
func (u cpuUse) String() string {
	if !u.ok {
		return "n/a"
	}
	who := fmt.Sprintf("gateway %.2f, load generator %.2f", u.server, u.loadgen)
	if u.isPgbench {
		who = fmt.Sprintf("pgbench %.2f", u.pgbench)
	}
	s := fmt.Sprintf("%s, postgres %.2f, irq/softirq %.2f, kernel threads %.2f, other processes %.2f", who, u.postgres, u.irq, u.kthreads, u.others)
	if u.topOthers != "" {
		s += " (" + u.topOthers + ")"
	}
	return s + fmt.Sprintf("; machine busy %.2f of %.0f", u.machine, u.cores)
}

// disturbedAbove is the CPU use of other processes, in cores, above which
// a phase is marked disturbed.
const disturbedAbove = 0.1

func (u cpuUse) otherLoad() float64 { return u.others }

func warnDisturbed(out io.Writer, u cpuUse) {
	if u.others > disturbedAbove {
		fmt.Fprintf(out, "  WARNING: other processes used %.2f cores during this phase (%s): its numbers are low; rerun on an idle machine\n", u.others, u.topOthers)
	}
}
