package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// Every command's help ends with examples of itself, and every flag of the
// serving commands is in a group.
func TestHelpHasExamplesAndGroups(t *testing.T) {
	var walk func([]*cli.Command, string)
	walk = func(cmds []*cli.Command, prefix string) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			name := strings.TrimSpace(prefix + " " + c.Name)
			if len(c.Subcommands) == 0 && !strings.Contains(c.Description, "Examples:\n   pbfs "+name) {
				t.Errorf("pbfs %s --help has no example of itself:\n%s", name, c.Description)
			}
			switch c.Name {
			case "mount", "backup", "promote", "node":
				for _, f := range c.Flags {
					if cf, ok := f.(cli.CategorizableFlag); ok && cf.GetCategory() == "" && f.Names()[0] != "help" {
						t.Errorf("pbfs %s: flag --%s is in no group", name, f.Names()[0])
					}
				}
			}
			walk(c.Subcommands, name)
		}
	}
	walk(newApp().Commands, "")
}

// Completion scripts are valid and pbfs answers what they ask; the manual
// page is made from the commands.
func TestCompletionAndMan(t *testing.T) {
	out, code := run(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "complete -o bashdefault -o default -F _pbfs pbfs") {
		t.Fatalf("completion bash: exit %d:\n%s", code, out)
	}
	if b, err := exec.Command("bash", "-n", "-c", out).CombinedOutput(); err != nil {
		t.Fatalf("the bash completion does not parse: %v\n%s", err, b)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--generate-bash-completion"}, "mount\n"},
		{[]string{"journal", "--generate-bash-completion"}, "replay\n"},
		{[]string{"mount", "--jo", "--generate-bash-completion"}, "--journal-reserve\n"},
		{[]string{"completion", "zsh"}, "#compdef pbfs"},
		{[]string{"completion", "fish"}, "complete -c pbfs"},
		{[]string{"man"}, ".SH NAME"},
	} {
		if out, code := run(t, tc.args...); code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("pbfs %s: exit %d, want %q in:\n%.400s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
	if out, code := run(t, "completion", "tcsh"); code != 2 || !strings.Contains(out, "give bash, zsh or fish") {
		t.Errorf("completion tcsh: exit %d:\n%s", code, out)
	}
}
