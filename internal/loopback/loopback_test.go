package loopback_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/loopback"
)

func TestHost(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1:8233": true, "localhost:8233": true, "LOCALHOST": true, "[::1]:8233": true, "127.1.2.3": true, "::1": true,
		"evil.example:8233": false, "evil.example": false, "10.0.0.1:80": false, "localhost.evil.example": false, "": false,
	} {
		require.Equal(t, want, loopback.Host(h), h)
	}
}

// A rebound page's request (a foreign Host on a loopback listener) is
// refused before the handler runs; the server's own names pass.
func TestGuardRefusesAForeignHostOnLoopback(t *testing.T) {
	called := 0
	srv := httptest.NewServer(loopback.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called++ })))
	defer srv.Close()
	do := func(host string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/x", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden {
			require.Contains(t, string(body), "is not this server's loopback address")
		}
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, do("evil.example:80"))
	require.Equal(t, 0, called)
	require.Equal(t, http.StatusOK, do(srv.Listener.Addr().String()))
	require.Equal(t, http.StatusOK, do("localhost"))
	require.Equal(t, 2, called)
}
