package devstack

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/loopback"
	"github.com/agentsaga/agentsaga/internal/sandbox"
)

// Files a stack with a data directory keeps there, each mode 0600 and made
// on first start.
const (
	// KeysFile is the payload codec's keyring.
	KeysFile = codec.KeysFileName
	// CodecTokenFile is the codec server's token.
	CodecTokenFile = codec.TokenFileName
	// SandboxTokenFile is the sandbox admin API's token.
	SandboxTokenFile = sandbox.TokenFileName
)

// prepareSecrets sets the keyring, the codec token and the sandbox token:
// from the data directory (made there when missing) when persist is set,
// else fresh in memory. The keyring is Options.Keyring, else the one the
// environment names ($AGENTSAGA_CODEC_KEYS_FILE, $AGENTSAGA_CODEC_KEYS),
// else the data directory's (or a fresh one).
func (st *Stack) prepareSecrets(o Options, dir string, persist bool) error {
	var err error
	if o.Keyring == nil {
		// Every client of this machine reads these variables; the stack
		// encrypts with what they name so that such clients read its plans.
		if o.Keyring, _, err = codec.KeyringFromEnvironment(); err != nil {
			return fmt.Errorf("payload keys: %w", err)
		}
	}
	switch {
	case o.Keyring != nil:
		st.Keyring = o.Keyring
	case persist:
		st.KeysFile = filepath.Join(dir, KeysFile)
		if st.Keyring, _, err = codec.LoadOrCreate(st.KeysFile); err != nil {
			return fmt.Errorf("payload keys: %w (fix the file, or pass keys in Options.Keyring)", err)
		}
	default:
		if st.Keyring, err = codec.GenerateKeyring("dev-1"); err != nil {
			return err
		}
	}
	if !persist {
		if st.CodecToken, err = codec.NewToken(); err != nil {
			return err
		}
		st.SandboxToken, err = sandbox.NewToken()
		return err
	}
	st.CodecTokenFile = filepath.Join(dir, CodecTokenFile)
	if st.CodecToken, err = codec.LoadOrCreateToken(st.CodecTokenFile); err != nil {
		return fmt.Errorf("codec token: %w", err)
	}
	st.SandboxTokenFile = filepath.Join(dir, SandboxTokenFile)
	st.SandboxToken, err = sandbox.ReadTokenFile(st.SandboxTokenFile)
	if err == nil {
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if st.SandboxToken, err = sandbox.NewToken(); err != nil {
		return err
	}
	return sandbox.WriteTokenFile(st.SandboxTokenFile, st.SandboxToken)
}

// startCodec serves the codec server on addr (a free loopback port when
// empty) and sets CodecURL. The Web UI's origin is allowed once it is known.
func (st *Stack) startCodec(addr string, log *slog.Logger) (*codec.Server, error) {
	srv, err := codec.NewServer(st.Keyring, st.CodecToken, nil)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("codec server: listen on %s: %w (choose another Options.CodecAddr, or leave it empty for a free port)", addr, err)
	}
	st.CodecURL = "http://" + ln.Addr().String()
	hs := &http.Server{Handler: loopback.Guard(srv), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	st.codecSrv = hs
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("codec server stopped", "error", err)
		}
	}()
	return srv, nil
}
