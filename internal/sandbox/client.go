package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// Client is the Go client of a sandbox's admin API, for the CLI, the demo
// and tests.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// NewClient returns a client of the sandbox served at baseURL (its root,
// such as http://127.0.0.1:40123). hc nil means http.DefaultClient. It
// sends the admin token of the sandbox at baseURL when that sandbox runs in
// this process, else $AGENTSAGA_SANDBOX_TOKEN; WithToken sets another.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	base := strings.TrimRight(baseURL, "/")
	tok := tokenFor(base)
	if tok == "" {
		tok = os.Getenv(EnvToken)
	}
	return &Client{base: base, hc: hc, token: tok}
}

// WithToken returns a copy of c that sends token to the admin API.
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.token = token
	return &cp
}

// String names the sandbox; the token is never shown.
func (c *Client) String() string { return "sandbox.Client(" + c.base + ", token masked)" }

// Effects returns every committed row of provider ("" for all providers),
// reversals included, oldest first.
func (c *Client) Effects(ctx context.Context, provider string) ([]Effect, error) {
	path := "/admin/effects"
	if provider != "" {
		path += "?provider=" + url.QueryEscape(provider)
	}
	var out []Effect
	return out, c.call(ctx, http.MethodGet, path, nil, &out)
}

// Fault adds a fault on the next f.Count requests to f.Op.
func (c *Client) Fault(ctx context.Context, f FaultSpec) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("sandbox fault: %w", err)
	}
	return c.call(ctx, http.MethodPost, "/admin/faults", f, nil)
}

// Faults returns the faults still pending.
func (c *Client) Faults(ctx context.Context) ([]FaultSpec, error) {
	var out []FaultSpec
	return out, c.call(ctx, http.MethodGet, "/admin/faults", nil, &out)
}

// ClearFaults removes every pending fault.
func (c *Client) ClearFaults(ctx context.Context) error {
	return c.call(ctx, http.MethodDelete, "/admin/faults", nil, nil)
}

// Calls returns how many requests reached each operation since the start
// or the last Reset: the named ops (0 when never called), or every op that
// was called when none is named.
func (c *Client) Calls(ctx context.Context, ops ...string) (map[string]int, error) {
	q := url.Values{}
	for _, op := range ops {
		q.Add("op", op)
	}
	path := "/admin/calls"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	out := map[string]int{}
	return out, c.call(ctx, http.MethodGet, path, nil, &out)
}

// SetIndexLag sets the CRM search index lag for tickets created from now on.
func (c *Client) SetIndexLag(ctx context.Context, l IndexLag) error {
	return c.call(ctx, http.MethodPut, "/admin/crm/index-lag", l, nil)
}

// Reset clears the faults, the call counters and the index lag. Effects
// stay: the stores are the truth.
func (c *Client) Reset(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/admin/reset", nil, nil)
}

// URLs returns the providers' base URLs as the sandbox reports them.
func (c *Client) URLs(ctx context.Context) (URLs, error) {
	var u URLs
	return u, c.call(ctx, http.MethodGet, "/admin/providers", nil, &u)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("sandbox admin %s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("sandbox admin %s %s: %w", method, path, err)
	}
	if in != nil || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set(TokenHeader, c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox admin %s %s: %w (is the sandbox running at %s?)", method, path, err, c.base)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("sandbox admin %s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("sandbox admin %s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("sandbox admin %s %s: status %d", method, path, resp.StatusCode)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("sandbox admin %s %s: decode the answer: %w", method, path, err)
		}
	}
	return nil
}
