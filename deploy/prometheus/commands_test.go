package prometheusdeploy

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/fleetctl"
)

// quotedCommand is a fleetctl command line an alert's text tells the
// operator to run: in single quotes in the rules, in backticks in the docs.
var (
	quotedCommand = regexp.MustCompile(`'(fleetctl [^']*)'`)
	tickedCommand = regexp.MustCompile("`(fleetctl [^`]*)`")
	// template is a Go template action of an annotation; labelRef one that
	// prints a label, given a value an operator would see.
	template = regexp.MustCompile(`\{\{[^}]*\}\}`)
	labelRef = regexp.MustCompile(`^\{\{\s*\$labels\.([a-z_]+)\s*\}\}$`)
)

// proseCommand is "fleetctl" and the word after it outside quotes: a
// command when that word is one of fleetctl's (isCommand), else prose
// ("written by something other than fleetctl (a raw KV write").
var proseCommand = regexp.MustCompile(`fleetctl ([a-z-]+)`)

func isCommand(name string) bool {
	for _, c := range fleetctl.NewCommand().Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return true
		}
	}
	return false
}

var labelSamples = map[string]string{"group": "prod", "version": "1.2.0", "source": "plan", "key": "fleet_plan/spec", "webhook": "hooks.example-1a2b3c4d", "instance": "c1:8080", "security_release": "1.3.0"}

// alertCommands are the fleetctl command lines of every alert's summary and
// description in fleetwave.rules.yml, labels filled in; it fails on a
// "fleetctl" that is not quoted as a whole command (the check could not
// see it).
func alertCommands(t *testing.T) map[string][]string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "fleetwave.rules.yml", &rules)
	out := map[string][]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for name, text := range r.Annotations {
				cmds := quotedCommand.FindAllStringSubmatch(text, -1)
				for _, m := range proseCommand.FindAllStringSubmatch(quotedCommand.ReplaceAllString(text, ""), -1) {
					if isCommand(m[1]) {
						t.Errorf("%s %s: %q is not quoted 'fleetctl …': quote every command so that it is checked", r.Alert, name, m[0])
					}
				}
				for _, c := range cmds {
					line := template.ReplaceAllStringFunc(c[1], func(action string) string {
						if m := labelRef.FindStringSubmatch(action); m != nil {
							if v, ok := labelSamples[m[1]]; ok {
								return v
							}
						}
						t.Errorf("%s %s: %q: no sample value for %s", r.Alert, name, c[1], action)
						return "x"
					})
					out[r.Alert+" "+name+": "+c[1]] = strings.Fields(line)
				}
			}
		}
	}
	return out
}

// checkCommand runs args (a fleetctl command line) with --help through
// fleetctl's own cobra command tree: an unknown command, subcommand or flag,
// or a missing or extra argument, is an error. Nothing reaches the bus.
func checkCommand(args []string) error {
	root := fleetctl.NewCommand()
	cmd, rest, err := root.Find(args[1:])
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	pos := cmd.Flags().Args()
	if !cmd.Runnable() && len(pos) > 0 {
		return &unknownError{cmd.CommandPath(), pos[0]}
	}
	if cmd.Runnable() {
		if err := cmd.ValidateArgs(pos); err != nil {
			return err
		}
	}
	root = fleetctl.NewCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args[1:len(args):len(args)], "--help"))
	if err := root.Execute(); err != nil {
		return err
	}
	if !strings.Contains(out.String(), "Usage:") {
		return &unknownError{cmd.CommandPath(), "--help printed no usage: " + out.String()}
	}
	return nil
}

type unknownError struct{ cmd, arg string }

func (e *unknownError) Error() string { return e.cmd + ": unknown subcommand or argument " + e.arg }

// TestAlertCommandsExist (issue 25 point 5): every fleetctl command an
// alert's text tells the operator to run, and every one docs/metrics.md
// names, is a command fleetctl has, with flags it takes: checked against
// the real command tree, so that a renamed command or flag fails here
// rather than in an incident (FleetwaveVersionDrift said 'fleetctl agents
// --group G', an unknown flag).
func TestAlertCommandsExist(t *testing.T) {
	cmds := alertCommands(t)
	if len(cmds) < 5 {
		t.Errorf("%d fleetctl commands in the alerts' texts; want the halt's, alert_after's, drift's, pause's and quarantine's at least", len(cmds))
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range tickedCommand.FindAllStringSubmatch(string(doc), -1) {
		line := strings.NewReplacer("GROUP", "prod", "VERSION", "1.2.0").Replace(m[1])
		cmds["docs/metrics.md: "+m[1]] = strings.Fields(line)
	}
	for where, args := range cmds {
		if err := checkCommand(args); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
}

// TestCheckCommandRefuses: the check itself tells a bad command from a
// good one.
func TestCheckCommandRefuses(t *testing.T) {
	for _, line := range []string{
		"fleetctl agents --group prod", // the flag is ls's
		"fleetctl agnets ls",           // no such command
		"fleetctl agents list",         // no such subcommand
		"fleetctl quarantine rm",       // the version is missing
		"fleetctl status --grop prod",  // no such flag
		"fleetctl config set --mode",   // the flag's value is missing
	} {
		if err := checkCommand(strings.Fields(line)); err == nil {
			t.Errorf("%q passed the check", line)
		}
	}
	for _, line := range []string{"fleetctl agents ls --group prod", "fleetctl quarantine rm 1.2.0", "fleetctl status", "fleetctl config set --mode enabled"} {
		if err := checkCommand(strings.Fields(line)); err != nil {
			t.Errorf("%q: %v", line, err)
		}
	}
}
