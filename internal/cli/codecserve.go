package cli

import (
	"context"
	"crypto/tls"
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
	"github.com/agentsaga/agentsaga/internal/privfile"
)

// cmdCodec runs the codec server the Temporal Web UI calls to show encrypted
// payloads to those who hold its token.
func cmdCodec(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	sub, err := subcommands("codec", args, out, "serve", "keygen", "token")
	if err != nil {
		return err
	}
	switch sub {
	case "keygen":
		return codecKeygen(args[1:], out)
	case "token":
		return codecToken(args[1:], out)
	}
	fs := flag.NewFlagSet("codec serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8234", "where the codec server listens (the UI's browser calls it)")
	origins := fs.String("ui-origin", "http://localhost:8233", "the Web UI's origin(s) allowed to call it, comma-separated")
	keys := fs.String("codec-keys", "", "the keyring file (default env "+codec.EnvKeysFile+", else env "+codec.EnvKeys+")")
	tokenFile := fs.String("token-file", os.Getenv(envCodecTokenFile), "a file holding the token operators log in with, as a mounted secret (env "+envCodecTokenFile+"; else env "+codec.EnvToken+"); `codec token --out FILE` makes one")
	tlsCert := fs.String("tls-cert", os.Getenv(envCodecTLSCert), "serve HTTPS with this certificate file (env "+envCodecTLSCert+"; `cluster certs` makes codec.pem); with --tls-key")
	tlsKey := fs.String("tls-key", os.Getenv(envCodecTLSKey), "the key of --tls-cert (env "+envCodecTLSKey+")")
	pos, err := parse(fs, args[1:], out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("codec serve: takes no arguments (see starter codec serve --help)")
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usageErr("codec serve: --tls-cert and --tls-key go together: give both or neither")
	}
	var tlsConf *tls.Config
	if *tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return usageErr("codec serve: --tls-cert/--tls-key: %v", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	ring, err := loadRing(*keys)
	if err != nil {
		return usageErr("codec serve: %v", err)
	}
	token := os.Getenv(codec.EnvToken)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return usageErr("codec serve: --token-file: %v", err)
		}
		token = strings.TrimRight(string(b), "\r\n")
	}
	if token == "" {
		return usageErr("codec serve: give --token-file FILE (env %s) or set %s to the token operators log in with (`codec token --out FILE` makes a strong one); it is never a flag", envCodecTokenFile, codec.EnvToken)
	}
	srv, err := codec.NewServer(ring, token, strings.Split(*origins, ","))
	if err != nil {
		return usageErr("codec serve: %v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("codec serve: listen on %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: loopback.Guard(srv), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsConf)
	}
	fmt.Fprintf(out, "codec server on %s://%s (key %s; token from %s: set; log in at /login)\n", scheme, ln.Addr(), ring.Current(), codec.EnvToken)
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

// envCodecTokenFile names the codec server's token file.
const envCodecTokenFile = "AGENTSAGA_CODEC_TOKEN_FILE"

// envCodecTLSCert and envCodecTLSKey name the codec server's HTTPS
// certificate and key files.
const (
	envCodecTLSCert = "AGENTSAGA_CODEC_TLS_CERT"
	envCodecTLSKey  = "AGENTSAGA_CODEC_TLS_KEY"
)

// codecKeygen writes a new keyring file (mode 0600, never over an existing
// one): one fresh key, or --rotate's keys and a fresh current one, so users
// never write base64 by hand.
func codecKeygen(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("codec keygen", flag.ContinueOnError)
	file := fs.String("out", "", "the new keyring file, written with mode 0600; never overwritten (required)")
	id := fs.String("id", "", "the new key's id, 1 to 64 letters, digits, '-', '_' or '.' (default k<unix time>)")
	rotate := fs.String("rotate", "", "an existing keyring file: the new file holds its keys too, and the new key becomes current (payloads sealed with the old keys still read)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 || *file == "" {
		return usageErr("codec keygen: usage: codec keygen --out FILE [--id ID] [--rotate OLD-FILE]")
	}
	kid := *id
	if kid == "" {
		kid = fmt.Sprintf("k%d", now().Unix())
	}
	var ring *codec.Keyring
	if *rotate != "" {
		old, err := codec.KeyringFile(*rotate)
		if err != nil {
			return usageErr("codec keygen: --rotate: %v", err)
		}
		ring, err = old.Rotate(kid)
		if err != nil {
			return usageErr("codec keygen: --id: %v", err)
		}
	} else if ring, err = codec.GenerateKeyring(kid); err != nil {
		return usageErr("codec keygen: --id: %v", err)
	}
	data, err := ring.MarshalKeyFile()
	if err != nil {
		return err
	}
	if err := privfile.Create(*file, data); err != nil {
		return fmt.Errorf("codec keygen: %w", err)
	}
	fmt.Fprintf(out, "wrote %s (mode 0600; keys %s, current %s): give it to the worker, the starter and the codec server with --codec-keys or env %s\n",
		safe(*file), safe(strings.Join(ring.IDs(), ", ")), safe(ring.Current()), codec.EnvKeysFile)
	return nil
}

// codecToken writes a new random token for the codec server (mode 0600,
// never over an existing file).
func codecToken(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("codec token", flag.ContinueOnError)
	file := fs.String("out", "", "the new token file, written with mode 0600; never overwritten (required)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 || *file == "" {
		return usageErr("codec token: usage: codec token --out FILE")
	}
	tok, err := codec.NewToken()
	if err != nil {
		return err
	}
	if err := privfile.Create(*file, []byte(tok+"\n")); err != nil {
		return fmt.Errorf("codec token: %w", err)
	}
	fmt.Fprintf(out, "wrote %s (mode 0600): give it to codec serve with --token-file or env %s; operators log in with it\n", safe(*file), envCodecTokenFile)
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
