package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Shell completion and the manual page, both generated from the command
// definitions: the shells ask pbfs itself what may come next (the hidden
// --generate-bash-completion flag urfave/cli answers), so they never go
// stale.

// bashCompletion asks pbfs for the words that may follow what is typed.
const bashCompletion = `# pbfs completion for bash: pbfs lists what may come next.
_pbfs() {
	local word="${COMP_WORDS[COMP_CWORD]}" words
	if [[ "$word" == -* ]]; then
		words=$("${COMP_WORDS[@]:0:COMP_CWORD}" "$word" --generate-bash-completion 2>/dev/null)
	else
		words=$("${COMP_WORDS[@]:0:COMP_CWORD}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$words" -- "$word"))
}
complete -o bashdefault -o default -F _pbfs pbfs
`

// zshCompletion runs the bash one through zsh's bash completion layer.
const zshCompletion = `#compdef pbfs
# pbfs completion for zsh, through zsh's support for bash completions.
autoload -U +X bashcompinit && bashcompinit
` + bashCompletion

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Action: func(c *cli.Context) error {
			w := c.App.Writer
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(w, bashCompletion)
			case "zsh":
				fmt.Fprint(w, zshCompletion)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return cli.Exit("completion: "+err.Error(), 1)
				}
				fmt.Fprint(w, s)
			default:
				return cli.Exit(fmt.Sprintf("completion: give bash, zsh or fish (got %q)", c.Args().First()), 2)
			}
			return nil
		},
	}
}

func manCommand() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print pbfs's manual page (roff), made from the commands' own help",
		Action: func(c *cli.Context) error {
			s, err := c.App.ToMan()
			if err != nil {
				return cli.Exit("man: "+err.Error(), 1)
			}
			fmt.Fprint(c.App.Writer, s)
			return nil
		},
	}
}
