package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
)

// startUI starts the Web UI on host and hold's port against this server's
// frontend and waits until it serves its start page.
//
// The UI server exits the process when it cannot listen and offers no way to
// hand it a listener, so pickPorts held the port until now and it is released
// only as the UI starts; what remains is a process binding that very port in
// the moment between.
func (s *Server) startUI(ctx context.Context, host string, hold *net.TCPListener, codec UICodec) error {
	port := hold.Addr().(*net.TCPAddr).Port
	ui := uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
		Host:                host,
		Port:                port,
		TemporalGRPCAddress: s.frontend,
		EnableUI:            true,
		DefaultNamespace:    s.namespace,
		// Plain HTTP on a developer's machine: the CSRF cookie must work without TLS.
		CORS:     uiconfig.CORS{CookieInsecure: true},
		HideLogs: true,
		Codec: uiconfig.Codec{
			Endpoint:            codec.Endpoint,
			IncludeCredentials:  codec.IncludeCredentials,
			PassAccessToken:     codec.PassAccessToken,
			DefaultErrorMessage: codecErrorMessage(codec),
		},
	}))
	if err := hold.Close(); err != nil {
		return fmt.Errorf("devserver: release the Web UI port %d for the UI: %w", port, err)
	}
	done := make(chan error, 1)
	go func() { done <- ui.Start() }()
	s.ui, s.uiDone = ui, done
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
