// Package mcptest helps tests run mcptool against real upstream MCP servers:
// it finds the npm servers that integration/mcpupstream installs (npm ci) and
// injects the fault the saga must survive, an answer lost after the upstream
// acted.
package mcptest

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Package names of the upstream servers installed by integration/mcpupstream.
const (
	Filesystem = "server-filesystem"
	Memory     = "server-memory"
)

// Upstream returns the node binary and the entry script of the npm server
// pkg (Filesystem or Memory) installed under integration/mcpupstream. When
// either is missing the test skips saying how to install them, or fails when
// CI=true (CI installs them in .ci/run).
func Upstream(t testing.TB, pkg string) (node, script string) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "..", "integration", "mcpupstream")
	script = filepath.Join(dir, "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
	missing := func(why string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: CI must install it (.ci/run runs npm ci in integration/mcpupstream)", why)
		}
		t.Skipf("%s: run `npm ci` in integration/mcpupstream to run this test", why)
	}
	if _, err := os.Stat(script); err != nil {
		missing("@modelcontextprotocol/" + pkg + " is not installed")
	}
	node, err := lookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	return node, script
}

func lookPath(name string) (string, error) {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

// Dropper loses the answer of upstream tool calls: set Arm(tool, n) and the
// next n answers to a tools/call of that tool are dropped, after which the
// connection is closed (a stdio server's process is stopped), as when the
// upstream dies after it acted. Use Wrap as mcptool.Server.WrapConnection.
type Dropper struct {
	mu      sync.Mutex
	tool    string
	left    int
	dropped int
	calls   map[string]int
}

// Calls counts the tools/call requests of upstream tool name written to
// the upstream through the wrapped connections.
func (d *Dropper) Calls(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[name]
}

// Arm makes the next n answers of upstream tool name be lost.
func (d *Dropper) Arm(name string, n int) {
	d.mu.Lock()
	d.tool, d.left = name, n
	d.mu.Unlock()
}

// Dropped counts the answers lost so far.
func (d *Dropper) Dropped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// Wrap wraps one connection.
func (d *Dropper) Wrap(c mcp.Connection) mcp.Connection {
	return &dropConn{Connection: c, d: d, ids: map[jsonrpc.ID]bool{}}
}

type dropConn struct {
	mcp.Connection
	d   *Dropper
	mu  sync.Mutex
	ids map[jsonrpc.ID]bool
}

func (c *dropConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/call" {
		var p struct {
			Name string `json:"name"`
		}
		_ = jsonUnmarshal(r.Params, &p)
		c.d.mu.Lock()
		if c.d.calls == nil {
			c.d.calls = map[string]int{}
		}
		c.d.calls[p.Name]++
		if c.d.left > 0 && p.Name == c.d.tool {
			c.d.left--
			c.mu.Lock()
			c.ids[r.ID] = true
			c.mu.Unlock()
		}
		c.d.mu.Unlock()
	}
	return c.Connection.Write(ctx, m)
}

func (c *dropConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		return m, err
	}
	if r, ok := m.(*jsonrpc.Response); ok {
		c.mu.Lock()
		drop := c.ids[r.ID]
		delete(c.ids, r.ID)
		c.mu.Unlock()
		if drop {
			// The upstream acted and answered; the answer never arrives
			// and the upstream goes away.
			c.d.mu.Lock()
			c.d.dropped++
			c.d.mu.Unlock()
			_ = c.Connection.Close()
			return nil, mcp.ErrConnectionClosed
		}
	}
	return m, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Example returns catalog/examples/mcp-filesystem.yaml rewritten to run the
// servers installed under integration/mcpupstream with node (the shipped
// file runs them with npx, which fetches them), and the environment it
// reads: a fresh allowed directory (AGENTSAGA_FS_ROOT, returned as dir) and
// memory file. Missing servers skip or fail as Upstream does.
func Example(t testing.TB) (src []byte, env map[string]string, dir string) {
	t.Helper()
	node, fsScript := Upstream(t, Filesystem)
	_, memScript := Upstream(t, Memory)
	_, self, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "catalog", "examples", "mcp-filesystem.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for _, r := range [][2]string{
		{"command: npx\n    args: [\"-y\", \"@modelcontextprotocol/server-filesystem@2026.8.31\", \"${AGENTSAGA_FS_ROOT}\"]",
			"command: \"${NODE}\"\n    args: [\"${FS_SCRIPT}\", \"${AGENTSAGA_FS_ROOT}\"]"},
		{"command: npx\n    args: [\"-y\", \"@modelcontextprotocol/server-memory@2026.8.31\"]",
			"command: \"${NODE}\"\n    args: [\"${MEM_SCRIPT}\"]"},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("the example no longer declares %q: update mcptest.Example", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	dir = Dir(t)
	env = map[string]string{"NODE": node, "FS_SCRIPT": fsScript, "MEM_SCRIPT": memScript,
		"AGENTSAGA_FS_ROOT": dir, "AGENTSAGA_MEMORY_FILE": filepath.Join(Dir(t), "memory.jsonl")}
	return []byte(s), env, dir
}

// Dir returns a new empty directory for an upstream's files, removed when
// the test ends. Unlike t.TempDir its path holds no run of digits: the
// engine refuses arguments that look like card numbers (13 to 19 digits
// passing Luhn, grouped by any separator, "/" among them), and a random
// numeric temp name joined to "/001" is one about once in ten.
func Dir(t testing.TB) string {
	t.Helper()
	const letters = "abcdefghijklmnopqrstuvwxyz"
	name := make([]byte, 12)
	for i := range name {
		name[i] = letters[rand.IntN(len(letters))]
	}
	base, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "agentsaga-mcp-"+string(name))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("make a directory for the upstream: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
