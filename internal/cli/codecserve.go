package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/loopback"
)

// cmdCodec runs the codec server the Temporal Web UI calls to show encrypted
// payloads to those who hold its token.
func cmdCodec(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	if _, err := subcommands("codec", args, out, "serve"); err != nil {
		return err
	}
	fs := flag.NewFlagSet("codec serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8234", "where the codec server listens (the UI's browser calls it)")
	origins := fs.String("ui-origin", "http://localhost:8233", "the Web UI's origin(s) allowed to call it, comma-separated")
	keys := fs.String("codec-keys", "", "the keyring file (default env "+codec.EnvKeysFile+", else env "+codec.EnvKeys+")")
	pos, err := parse(fs, args[1:], out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("codec serve: takes no arguments (see starter codec serve --help)")
	}
	ring, err := loadRing(*keys)
	if err != nil {
		return usageErr("codec serve: %v", err)
	}
	token := os.Getenv(codec.EnvToken)
	if token == "" {
		return usageErr("codec serve: set %s to the token operators log in with (codec.NewToken makes a strong one); it is never a flag", codec.EnvToken)
	}
	srv, err := codec.NewServer(ring, token, strings.Split(*origins, ","))
	if err != nil {
		return usageErr("codec serve: %v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("codec serve: listen on %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: loopback.Guard(srv), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "codec server on http://%s (key %s; token from %s: set; log in at /login)\n", ln.Addr(), ring.Current(), codec.EnvToken)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("codec serve: %w", err)
	}
	return nil
}

func loadRing(file string) (*codec.Keyring, error) {
	if file != "" {
		return codec.KeyringFile(file)
	}
	ring, _, err := codec.KeyringFromEnvironment()
	if err == nil && ring == nil {
		err = fmt.Errorf("no keyring: give --codec-keys FILE, or env %s or %s", codec.EnvKeysFile, codec.EnvKeys)
	}
	return ring, err
}
