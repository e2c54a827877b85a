package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main runs a command such as Worker (through run) under a context that
// ends on SIGINT or SIGTERM, prints its error, and returns the exit code: 0,
// 1 when it failed, 2 for a UsageError. A second signal ends the process at
// once. A team's worker main is:
//
//	func main() {
//		os.Exit(app.Main(os.Args[1:], func(ctx context.Context, args []string) error {
//			return app.Worker(ctx, args, app.Options{Tools: []tool.Tool{mytool.New()}})
//		}))
//	}
func Main(args []string, run func(ctx context.Context, args []string) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopSignals = stop
	if err := run(ctx, args); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		var ue UsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}
