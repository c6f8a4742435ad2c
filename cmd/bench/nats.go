package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsPhase runs the --role all phase again with a NATS JetStream target
// instead of the HTTP sink. It starts a nats-server -js of its own, with a
// stream that takes the target's subject. It reports the ratio of first
// deliveries per second to the no-target phase's, beside httpRatio. Then
// every accepted event must be in the stream, once, within the drain
// timeout.
func (b *bench) natsPhase(ctx context.Context, httpRatio float64) error {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			b.line("----", "forwarding to NATS: not measured (no nats-server: install the Debian/Ubuntu package 'nats-server')")
			return nil
		}
		bin = "/usr/sbin/nats-server"
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.CommandContext(ctx, bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", b.tmp+"/nats")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	var nc *nats.Conn
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if nc, err = nats.Connect(url); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("connect to nats-server: %w", err)
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		return fmt.Errorf("create the stream: %w", err)
	}
	config := benchConfig + "    forward:\n      - name: bus\n        url: " + url + "\n        nats: { subject: \"bench.{sender}.{event_type}\" }\n        event_types: [\"charge.*\"]\n"
	srv, err := b.startServer(ctx, "server-forward-nats", config, "--role", "all")
	if err != nil {
		return err
	}
	defer func() { _ = srv.stop() }()
	b.checkpoint(ctx)
	// The stream's count of messages, when the last read succeeded.
	stored := func() (n uint64) {
		if info, err := stream.Info(ctx); err == nil {
			n = info.State.Msgs
		}
		return n
	}
	// wait waits until the stream holds n messages, up to the drain
	// timeout, and returns how many it holds.
	wait := func(n int) (got uint64) {
		for deadline := time.Now().Add(b.forwardDrain); ; time.Sleep(20 * time.Millisecond) {
			if got = stored(); got >= uint64(n) || time.Now().After(deadline) || ctx.Err() != nil || srv.exited() {
				return got
			}
		}
	}
	const tag = "fwn"
	var dr drain
	load, refLoad, refName, err := b.compared(ctx, srv, "first delivery, 1 NATS target, all", tag, loadConfig{}, b.ref != nil,
		dr.afterSlices(ctx, b, srv, tag, func(n int) int { return int(wait(n)) }))
	if err != nil {
		return err
	}
	b.ratio("forwarding to NATS JetStream: --role all %.0f/s ÷ without a target %.0f/s", load.rate(), refLoad.rate(), b.minForwardAllRatio, load.cpu, refLoad.cpu, "NATS phase", refName)
	ratio := load.rate() / max(refLoad.rate(), 1)
	fmt.Fprintf(b.out, "  NATS target %.2f× the no-target rate, HTTP target %.2f× (NATS ÷ HTTP %.2f)\n", ratio, httpRatio, ratio/max(httpRatio, 1e-9))
	if b.ref == nil {
		dr.add(b, srv, func() int { return int(wait(load.accepted)) }, load.end)
	}
	b.timed(dr.received == load.accepted && load.accepted > 0, busier(load.cpu, dr.cpu), "forwarding to NATS, --role all: the stream holds %d messages for %d accepted events %s after the load's end",
		dr.received, load.accepted, dr.wait.Round(10*time.Millisecond))
	b.check(load.errors == 0 && load.count > 0, "forwarding to NATS, --role all: %d errors in %d requests", load.errors, load.requests)
	b.stop(srv, " (--role all, one NATS target)")
	return nil
}
