package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/agentsaga/agentsaga/internal/version"
)

// cmdVersion prints which agentsaga this is, so a user can say what they
// run: `starter version` prints "agentsaga VERSION (GOVERSION)".
func cmdVersion(_ context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("version takes no arguments (see starter version --help)")
	}
	if *asJSON {
		return printJSON(out, map[string]string{"version": version.String(), "go": runtime.Version()})
	}
	_, err = fmt.Fprintln(out, version.Line())
	return err
}
