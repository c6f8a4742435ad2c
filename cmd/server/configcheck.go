package main

import (
	"errors"
	"fmt"
	"io"

	senderpkg "github.com/hookgate/hookgate/internal/sender"
)

// configCommand is `hookgate config check`: it loads the configuration
// file as serve does at start-up, ${VAR} expanded from the environment,
// and prints what it holds, or fails (exit status 1) with why it cannot be
// loaded: every unset ${VAR} with its line, or the field at fault. make run
// and make redeliver run it before anything else.
func configCommand(args []string, getenv func(string) string, stdout io.Writer) error {
	c := newCmdFlags("hookgate config check", "hookgate config check [--config FILE]",
		"Load the configuration file as serve would at start-up, ${VAR} expanded from the environment, and say what is wrong:\n"+
			"every unset ${VAR} with its line, or the field at fault. It exits 0 when the file loads, 1 when it does not.", getenv)
	var path string
	c.String(&path, "config", "FILE", "HOOKGATE_CONFIG", "hookgate.yaml", "configuration file")
	if len(args) > 0 && isHelpFlag(args[0]) {
		args = []string{"check", args[0]} // hookgate config --help: the help of config check
	}
	if len(args) == 0 || args[0] != "check" {
		return c.usageError(errors.New("the only subcommand is check"))
	}
	if done, err := c.parse(args[1:], stdout); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	set, err := senderpkg.Load(path)
	if err != nil {
		return &exitError{1, err}
	}
	cfg := set.Config()
	targets := 0
	for _, s := range cfg.Senders {
		targets += len(s.Forward)
	}
	fmt.Fprintf(stdout, "%s: loads: %d senders, %d forward targets\n", path, len(cfg.Senders), targets)
	return nil
}
