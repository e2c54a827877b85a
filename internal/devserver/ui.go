package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"

	"github.com/agentsaga/agentsaga/internal/loopback"
)

// startUI starts the Web UI for this server's frontend and waits until it
// serves its start page at hold's address.
//
// The UI server itself listens on a free loopback port of its own; what
// listens on hold (the port users open) is a reverse proxy that refuses a
// request whose Host is not a loopback name when it arrived on loopback
// (DNS rebinding: a web page whose name was rebound to 127.0.0.1 must not get
// a CSRF cookie and drive the UI's write actions). The UI server exits the
// process when it cannot listen and offers no way to hand it a listener: its
// own port is drawn by the kernel just before it starts.
func (s *Server) startUI(ctx context.Context, host string, hold *net.TCPListener, codec UICodec) error {
	port := hold.Addr().(*net.TCPAddr).Port
	inner, err := freeLoopbackPort()
	if err != nil {
		_ = hold.Close()
		return fmt.Errorf("devserver: a port for the Web UI server behind port %d: %w", port, err)
	}
	ui := uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
		Host:                internalHost,
		Port:                inner,
		TemporalGRPCAddress: s.frontend,
		EnableUI:            true,
		DefaultNamespace:    s.namespace,
		// Plain HTTP on a developer's machine: the CSRF cookie must work without TLS.
		CORS:     uiconfig.CORS{CookieInsecure: true},
		HideLogs: true,
		// No outbound call from the browser (newsfeed.temporal.io).
		DisableNewsFetch: true,
		Codec: uiconfig.Codec{
			Endpoint:            codec.Endpoint,
			IncludeCredentials:  codec.IncludeCredentials,
			PassAccessToken:     codec.PassAccessToken,
			DefaultErrorMessage: codecErrorMessage(codec),
		},
	}))
	done := make(chan error, 1)
	go func() { done <- ui.Start() }()
	s.ui, s.uiDone = ui, done
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(internalHost, strconv.Itoa(inner))}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // stream as the UI writes
	proxy.ErrorLog = stdlog.New(io.Discard, "", 0)
	s.uiProxy = &http.Server{Handler: loopback.Guard(proxy), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.uiProxy.Serve(hold) }()
	s.uiURL = "http://" + net.JoinHostPort(dialHost(host), strconv.Itoa(port))

	hc := &http.Client{}
	return poll(ctx, "the Web UI to answer at "+s.uiURL, func(ctx context.Context) error {
		select {
		case err := <-done:
			done <- err // Stop reads it again
			if err == nil {
				err = errors.New("no error reported")
			}
			return halt{fmt.Errorf("the Web UI server exited before it served a page: %w", err)}
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.uiURL+"/", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s/: %s", s.uiURL, resp.Status)
		}
		return nil
	})
}

// codecErrorMessage is what the UI shows when the codec endpoint refuses to
// decode (the browser has not logged in to it yet, say).
func codecErrorMessage(c UICodec) string {
	if c.Endpoint == "" {
		return ""
	}
	return "Payloads are encrypted. To read them, open " + strings.TrimRight(c.Endpoint, "/") + "/login in this browser and enter the codec token (worker --dev keeps it in <data-dir>/codec.token)."
}

// freeLoopbackPort returns a port that was free on the loopback address a
// moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(internalHost, "0"))
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}
