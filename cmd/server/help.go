package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one of hookgate's commands, as `hookgate help` lists it.
type command struct{ name, summary string }

// commands are hookgate's commands, in the order `hookgate help` lists
// them. run's switch dispatches them.
var commands = []command{
	{"serve", "apply pending migrations, then serve (the command when none is given)"},
	{"migrate", "apply pending migrations and exit"},
	{"api", "operate a running hookgate through its HTTP API: deliveries, events, redelivery, pause and resume"},
	{"redeliver", "forward a target's failed (or delivered) forwards again, straight through the database"},
	{"rules", "rules test: run a target's filter and transform on a body"},
	{"config", "config check: load the configuration file as serve would, and say what is wrong (an unset ${VAR}, a bad field)"},
	{"sink", "a forward target for trying hookgate out: prints each forward and checks its signature (make run starts it)"},
	{"version", "print the version"},
	{"help", "list the commands, or show one command's flags: hookgate help CMD"},
}

// errHelpShown is returned by parseSettings when it printed the help that
// --help asked for. run then returns nil.
var errHelpShown = errors.New("help shown")

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

// printCommands writes the list of commands, for hookgate help.
func printCommands(w io.Writer) {
	fmt.Fprintln(w, "hookgate: a webhook idempotency gateway.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: hookgate [COMMAND] [FLAGS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	printList(w, commands)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "hookgate help CMD, or hookgate CMD --help, shows a command's flags, one a line.")
}

// printList writes one line per command: its name and its summary.
func printList(w io.Writer, cmds []command) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cmds {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
}

// helpCommand is `hookgate help [CMD [SUBCMD]]`: the list of commands, or
// the help of one, as CMD --help shows it.
func helpCommand(args []string, run func(args []string) error, stdout io.Writer) error {
	if len(args) == 0 {
		printCommands(stdout)
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			if c.name == "help" || c.name == "version" {
				fmt.Fprintf(stdout, "usage: hookgate %s\n\n%s%s. It has no flags.\n", c.name, strings.ToUpper(c.summary[:1]), c.summary[1:])
				return nil
			}
			return run(append(append([]string{}, args...), "--help"))
		}
	}
	return &exitError{2, fmt.Errorf("help: unknown command %q: use %s", args[0], commandNames())}
}

// commandNames lists the commands' names for an error message.
func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// cmdFlags are the flags of one command. Each may fall back to an
// environment variable, and its help shows the flag, the variable, the
// default and a short description on one line. A flag's default is never
// the variable's value in the help, so that a token never shows there.
type cmdFlags struct {
	fs     *flag.FlagSet
	name   string // "hookgate api deliveries"
	usage  string // the usage line, without "usage: "
	about  string // what the command does
	footer string // a line after the flags, or ""
	rows   []flagRow
	getenv func(string) string
	// positional lets arguments stand between flags (event ID --json).
	positional bool
	args       []string // the arguments left after parse
}

// flagRow is one line of a command's help.
type flagRow struct{ flag, env, def, help string }

func newCmdFlags(name, usage, about string, getenv func(string) string) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors itself
	fs.Usage = func() {}
	return &cmdFlags{fs: fs, name: name, usage: usage, about: about, getenv: getenv}
}

// envOr returns the value of the variable env, or def when it is unset or
// empty (or env is "").
func (c *cmdFlags) envOr(env, def string) string {
	if env != "" {
		if v := c.getenv(env); v != "" {
			return v
		}
	}
	return def
}

// row adds the help line of the flag --name ARG (ARG "" for a boolean).
func (c *cmdFlags) row(name, arg, env, def, help string) {
	f := "--" + name
	if arg != "" {
		f += " " + arg
	}
	c.rows = append(c.rows, flagRow{f, env, def, help})
}

// String defines the flag --name ARG: the variable env without it, def
// without either.
func (c *cmdFlags) String(p *string, name, arg, env, def, help string) {
	c.fs.StringVar(p, name, c.envOr(env, def), help)
	c.row(name, arg, env, def, help)
}

// Bool defines the boolean flag --name, without a variable.
func (c *cmdFlags) Bool(p *bool, name, help string) {
	c.fs.BoolVar(p, name, false, help)
	c.row(name, "", "", "false", help)
}

// Var defines the flag --name ARG whose value v parses; v handles the
// variable env itself.
func (c *cmdFlags) Var(v flag.Value, name, arg, env, def, help string) {
	c.fs.Var(v, name, help)
	c.row(name, arg, env, def, help)
}

// help writes the command's usage, what it does and its flags, one a line.
func (c *cmdFlags) help(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.usage, c.about)
	if len(c.rows) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  FLAG\tENV\tDEFAULT\tDESCRIPTION")
		for _, r := range c.rows {
			env, def := r.env, r.def
			if env == "" {
				env = "-"
			}
			if def == "" {
				def = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.flag, env, def, r.help)
		}
		_ = tw.Flush()
	}
	if c.footer != "" {
		fmt.Fprintf(w, "\n%s\n", c.footer)
	}
}

// parse reads the flags in args; the arguments left are in c.args. It
// returns done when args asked for the help, which it printed to stdout.
// A flag it does not know, or a bad value, is a usage error (exit status 2).
func (c *cmdFlags) parse(args []string, stdout io.Writer) (done bool, err error) {
	var rest []string
	for {
		err := c.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.help(stdout)
			return true, nil
		}
		if err != nil {
			return false, c.usageError(err)
		}
		args = c.fs.Args()
		if !c.positional || len(args) == 0 {
			break
		}
		rest, args = append(rest, args[0]), args[1:]
	}
	c.args = append(rest, args...)
	return false, nil
}

// usageError is a usage error (exit status 2) of the command: err, the
// usage line and where the flags are listed.
func (c *cmdFlags) usageError(err error) error {
	return &exitError{2, fmt.Errorf("%s: %w\nusage: %s\n%s --help lists its flags", strings.TrimPrefix(c.name, "hookgate "), err, c.usage, c.name)}
}

// noArgs fails with a usage error when arguments are left after the flags.
func (c *cmdFlags) noArgs() error {
	if len(c.args) > 0 {
		return c.usageError(fmt.Errorf("unexpected argument %q", c.args[0]))
	}
	return nil
}

// shortHelp returns a setting's help for one line: without its long
// parenthesised asides, up to its first "; ", and at most about 100
// characters. docs/configuration.md holds the whole text.
func shortHelp(help string) string {
	var b strings.Builder
	for depth, start, i := 0, 0, 0; i < len(help); i++ {
		switch help[i] {
		case '(':
			if depth == 0 {
				start = i
			}
			depth++
		case ')':
			if depth--; depth == 0 && i-start <= 24 {
				b.WriteString(help[start : i+1]) // a short aside stays
			}
			continue
		}
		if depth == 0 {
			b.WriteByte(help[i])
		}
	}
	help = strings.NewReplacer("  ", " ", " ,", ",").Replace(b.String())
	if i := strings.Index(help, "; "); i > 0 {
		help = help[:i]
	}
	help = strings.TrimSpace(help)
	const most = 100
	if len(help) > most {
		cut := strings.LastIndex(help[:most], ", ")
		if cut < most/2 {
			cut = strings.LastIndex(help[:most], " ")
		}
		help = strings.TrimSpace(help[:cut]) + " …"
	}
	return help
}
