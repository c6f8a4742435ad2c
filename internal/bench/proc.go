package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc (100 on Linux).
const clockTicks = 100

// rssSampler records the peak VmRSS of a process, overall and since mark.
type rssSampler struct {
	mu        sync.Mutex
	peakKB    int64
	phaseKB   int64
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

func newRSSSampler(pid int, every time.Duration) *rssSampler {
	r := &rssSampler{done: make(chan struct{}), stopped: make(chan struct{})}
	path := fmt.Sprintf("/proc/%d/status", pid)
	go func() {
		defer close(r.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if kb, ok := readVmRSS(path); ok {
				r.mu.Lock()
				r.peakKB = max(r.peakKB, kb)
				r.phaseKB = max(r.phaseKB, kb)
				r.mu.Unlock()
			}
			select {
			case <-r.done:
				return
			case <-t.C:
			}
		}
	}()
	return r
}

// mark starts a new phase for phasePeakMB.
func (r *rssSampler) mark() {
	r.mu.Lock()
	r.phaseKB = 0
	r.mu.Unlock()
}

func (r *rssSampler) phasePeakMB() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return float64(r.phaseKB) / 1024
}

func (r *rssSampler) peakMB() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return float64(r.peakKB) / 1024
}

func (r *rssSampler) stop() {
	r.closeOnce.Do(func() { close(r.done) })
	<-r.stopped
}

// readVmRSS returns the VmRSS line of a /proc/<pid>/status file in kB.
func readVmRSS(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseVmRSS(data)
}

func parseVmRSS(status []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "VmRSS:") {
			continue
		}
		f := strings.Fields(line[len("VmRSS:"):])
		if len(f) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb, err == nil
	}
	return 0, false
}

// procStat holds the fields of /proc/<pid>/stat the benchmark uses.
type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

// parseProcStat parses a /proc/<pid>/stat line. The command name is in
// parentheses and may contain spaces, so fields are counted after the last ')'.
func parseProcStat(line []byte) (procStat, bool) {
	i := bytes.LastIndexByte(line, ')')
	j := bytes.IndexByte(line, '(')
	if i < 0 || j < 0 || j > i {
		return procStat{}, false
	}
	f := strings.Fields(string(line[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 15 {
		return procStat{}, false
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	return procStat{comm: string(line[j+1 : i]), ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, true
}

func readProcStat(pid int) (procStat, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(data)
}

// cpuSnap is the CPU time consumed so far by the processes the report
// distinguishes, by every other process, and by the machine.
type cpuSnap struct {
	at           time.Time
	server       int64 // ticks of the gateway
	postgres     int64 // ticks of the postmaster and all its children, live or reaped
	self         time.Duration
	machineBusy  int64 // ticks of all CPUs not idle or waiting for I/O
	machineIRQ   int64 // of which irq and softirq (not charged to any process)
	machineTotal int64
	others       map[int]procTicks // every other process
}

// procTicks is a process's name and CPU time, its reaped children's included.
type procTicks struct {
	comm    string
	kthread bool
	ticks   int64
}

// takeCPU snapshots the CPU times. pgPID is the postmaster's PID (0 when
// unknown: PostgreSQL's time is then not reported).
func takeCPU(serverPID, pgPID int) cpuSnap {
	s := cpuSnap{at: time.Now(), others: map[int]procTicks{}}
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d[len("/proc/"):])
		if err != nil || pid == self {
			continue
		}
		data, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		st, ok := parseProcStat(data)
		if !ok {
			continue
		}
		all := st.utime + st.stime + st.cutime + st.cstime
		switch {
		case pid == serverPID:
			s.server = st.utime + st.stime
		case pgPID > 0 && (pid == pgPID || st.ppid == pgPID):
			// The postmaster's cutime and cstime hold its reaped backends'.
			s.postgres += all
		default:
			s.others[pid] = procTicks{comm: st.comm, kthread: st.ppid == 2 || pid == 2, ticks: all}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.machineBusy, s.machineIRQ, s.machineTotal = machineTicks()
	return s
}

// gatewayPGTime returns the CPU time the gateway and PostgreSQL used
// between a and b.
func gatewayPGTime(a, b cpuSnap) time.Duration {
	return time.Duration(float64(b.server-a.server+b.postgres-a.postgres) / clockTicks * float64(time.Second))
}

// machineTicks returns the busy, irq+softirq and total ticks of the "cpu"
// line of /proc/stat.
func machineTicks() (busy, irq, total int64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0
	}
	v := make([]int64, len(f)-1)
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]
	// (guest time is already included in user and nice).
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy, v[5] + v[6], busy + v[3] + v[4]
}

// cpuUse is the CPU used between two snapshots, in cores (1.0 = one core
// busy for the whole interval).
type cpuUse struct {
	server, loadgen, postgres, pgbench float64
	irq, kthreads, others              float64 // irq+softirq, kernel threads, other processes
	topOthers                          string  // the other processes that used the most (a hint: reaped children count whole)
	machine, machineCores              float64
	ok, isPgbench                      bool
}

// cpuBetween returns the use between a and b; pgbench is the CPU time of a
// pgbench process in the interval, or nil.
func cpuBetween(a, b cpuSnap, pgbench *time.Duration) cpuUse {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return cpuUse{}
	}
	ticks := func(t int64) float64 { return float64(t) / clockTicks / secs }
	u := cpuUse{
		server:   ticks(b.server - a.server),
		loadgen:  (b.self - a.self).Seconds() / secs,
		postgres: ticks(b.postgres - a.postgres),
		irq:      ticks(b.machineIRQ - a.machineIRQ),
		ok:       true,
	}
	if pgbench != nil {
		u.pgbench = pgbench.Seconds() / secs
		u.isPgbench = true
	}
	byComm := map[string]int64{}
	for pid, p := range b.others {
		d := p.ticks - a.others[pid].ticks // a process started since a counts whole
		if d <= 0 {
			continue
		}
		if p.kthread {
			u.kthreads += ticks(d)
			continue
		}
		byComm[p.comm] += d
	}
	names := make([]string, 0, len(byComm))
	for c := range byComm {
		names = append(names, c)
	}
	slices.SortFunc(names, func(x, y string) int { return int(byComm[y] - byComm[x]) })
	var top []string
	for _, c := range names[:min(3, len(names))] {
		if v := ticks(byComm[c]); v >= 0.01 {
			top = append(top, fmt.Sprintf("%s %.2f", c, v))
		}
	}
	u.topOthers = strings.Join(top, ", ")
	if tot := b.machineTotal - a.machineTotal; tot > 0 {
		// /proc/stat sums all CPUs: scale to cores.
		u.machineCores = float64(tot) / clockTicks / secs
		u.machine = ticks(b.machineBusy - a.machineBusy)
		// Other processes: what the machine did beyond what is accounted
		// for. (Summing their deltas would overstate: a process that reaps
		// a long-running child gains the child's whole lifetime at once.)
		u.others = max(u.machine-u.server-u.loadgen-u.postgres-u.pgbench-u.irq-u.kthreads, 0)
	}
	return u
}

// String formats u as "gateway 0.81, load generator 0.32, … of 2 cores".
func (u cpuUse) String() string {
	if !u.ok {
		return "n/a"
	}
	var b strings.Builder
	if u.isPgbench {
		fmt.Fprintf(&b, "pgbench %.2f, ", u.pgbench)
	} else {
		fmt.Fprintf(&b, "gateway %.2f, load generator %.2f, ", u.server, u.loadgen)
	}
	fmt.Fprintf(&b, "postgres %.2f, irq/softirq %.2f, kernel threads %.2f, other processes %.2f", u.postgres, u.irq, u.kthreads, u.others)
	if u.topOthers != "" {
		fmt.Fprintf(&b, " (%s)", u.topOthers)
	}
	if u.machineCores > 0 {
		fmt.Fprintf(&b, "; machine busy %.2f of %.0f", u.machine, u.machineCores)
	}
	return b.String()
}

// otherLoad returns the cores used by processes that are not part of the
// measurement (other builds, tests, benchmarks).
func (u cpuUse) otherLoad() float64 {
	if !u.ok {
		return 0
	}
	return u.others
}

// disturbedAbove is the CPU use of other processes (in cores) above which a
// phase's numbers are flagged as disturbed.
const disturbedAbove = 0.1

func warnDisturbed(out io.Writer, u cpuUse) {
	if o := u.otherLoad(); o > disturbedAbove {
		fmt.Fprintf(out, "  WARNING: other processes used %.2f cores during this phase (%s): its numbers are low; rerun on an idle machine\n", o, u.topOthers)
	}
}
