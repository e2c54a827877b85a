package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentsaga/agentsaga/operators"
)

func cmdOperator(_ context.Context, args []string, _ io.Reader, out io.Writer) error {
	sub, err := subcommands("operator", args, out, "keygen", "show")
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("operator "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	var name, file, may, keyFile *string
	if sub == "keygen" {
		name = fs.String("name", "", "the operator's name, 1 to 64 printable characters, as decisions will show it (required)")
		file = fs.String("out", "", "the new private key file, written with mode 0600; never overwritten (required)")
		may = fs.String("may", "approve,resolve", "comma-separated actions to put in the printed entry: approve, resolve")
	} else {
		keyFile = fs.String("key", os.Getenv(envOperatorKey), "the private key file (env "+envOperatorKey+")")
		may = fs.String("may", "", "the actions to put in the entry (default: those the key was made for; required for a key file made before they were recorded)")
	}
	pos, err := parse(fs, args[1:], out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("operator %s: takes no arguments (see starter operator %s --help)", sub, sub)
	}
	var k *operators.Key
	var actions []string
	if sub == "keygen" {
		if *name == "" || *file == "" {
			return usageErr("operator keygen: usage: operator keygen --name NAME --out FILE [--may approve,resolve]")
		}
		if actions, err = mayList("keygen", *may); err != nil {
			return err
		}
		if k, err = operators.NewKey(*name, nil); err != nil {
			return usageErr("operator keygen: --name: %v", err)
		}
		k.May = actions
		if err := k.Write(*file); err != nil {
			return err
		}
	} else {
		if *keyFile == "" {
			return usageErr("operator show: --key FILE is required")
		}
		if k, err = operators.LoadKey(*keyFile); err != nil {
			return usageErr("operator show: %v", err)
		}
		switch {
		case *may != "":
			if actions, err = mayList("show", *may); err != nil {
				return err
			}
		case len(k.May) == 0:
			// Printing approve and resolve for a key made to resolve only
			// would widen its rights in a rebuilt operators file.
			return usageErr("operator show: %s was made before keys recorded their rights: give --may with what the operators file grants it (approve, resolve)", safe(*keyFile))
		}
	}
	entry := k.Entry(actions...)
	if *asJSON {
		return printJSON(out, entry)
	}
	line, err := jsonLine(entry)
	if err != nil {
		return err
	}
	if sub == "keygen" {
		fmt.Fprintf(out, "wrote %s (mode 0600): keep it private; it signs your decisions (--key %s, or env %s)\n", safe(*file), safe(*file), envOperatorKey)
	}
	fmt.Fprintf(out, "add this entry to the worker's operators file (worker --operators FILE, env AGENTSAGA_OPERATORS):\n%s\n", line)
	return nil
}

// mayList parses a --may list of actions.
func mayList(sub, list string) ([]string, error) {
	var actions []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a != operators.ActionApprove && a != operators.ActionResolve {
			return nil, usageErr("operator %s: --may: unknown action %q; give approve and/or resolve", sub, a)
		}
		actions = append(actions, a)
	}
	return actions, nil
}

func jsonLine(v any) (string, error) {
	var b strings.Builder
	if err := printJSONCompact(&b, v); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}
