package catalog_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/mcptool/mcptest"
	"github.com/agentsaga/agentsaga/tool"
)

// loadMCPExample loads examples/mcp-filesystem.yaml against the npm servers
// installed under integration/mcpupstream (node instead of npx, which would
// fetch them), on a fresh directory and memory file.
func loadMCPExample(t *testing.T, wrap func(string, mcp.Connection) mcp.Connection) (*catalog.Catalog, string) {
	t.Helper()
	src, env, dir := mcptest.Example(t)
	c, err := catalog.ParseWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, MCPWrap: wrap},
		catalog.Source{Name: "mcp-filesystem.yaml", Data: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, dir
}

func mcpCall(key string, args any) tool.Call {
	b, _ := json.Marshal(args)
	return tool.Call{Key: key, Args: b, Attempt: 1}
}

func TestMCPExampleAgainstRealServers(t *testing.T) {
	var d mcptest.Dropper
	c, dir := loadMCPExample(t, func(server string, conn mcp.Connection) mcp.Connection {
		if server == "filesystem" {
			return d.Wrap(conn)
		}
		return conn
	})
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	get := func(name string) tool.Tool {
		tl, ok := reg.Tool(name)
		if !ok {
			t.Fatalf("%s not registered", name)
		}
		return tl
	}
	if s := c.Specs()["fs_move"]; s.System != "filesystem/move_file" || s.Approval == nil || s.Compensator != "fs_move_back" {
		t.Fatalf("fs_move spec: %+v", s)
	}
	src, dst := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	if _, err := get("fs_write").Execute(ctx, mcpCall("s:1:1:fs_write", map[string]string{"path": src, "content": "hello"})); err != nil {
		t.Fatal(err)
	}
	res, err := get("fs_read").Execute(ctx, mcpCall("s:1:2:fs_read", map[string]string{"path": src}))
	if err != nil || !strings.Contains(string(res.Data), "hello") {
		t.Fatalf("fs_read: %s, %v", res.Data, err)
	}
	mv := get("fs_move")
	args := map[string]string{"source": src, "destination": dst}
	d.Arm("move_file", 1)
	if _, err := mv.Execute(ctx, mcpCall("s:1:3:fs_move", args)); tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("lost answer: %v, want unknown", err)
	}
	look, err := mv.(tool.CallReconciler).ReconcileCall(ctx, mcpCall("s:1:3:fs_move", args))
	if err != nil || look.Status != tool.Found {
		t.Fatalf("reconcile: %+v, %v", look, err)
	}
	// The reversal moves it back, built from the original's args.
	rev, _ := json.Marshal(tool.Reversal{OriginalKey: "s:1:3:fs_move", OriginalTool: "fs_move", OriginalArgs: mcpCall("", args).Args})
	if _, err := get("fs_move_back").Execute(ctx, tool.Call{Key: "s:1:3:fs_move:compensate", Args: rev, Attempt: 1}); err != nil {
		t.Fatalf("fs_move_back: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "a.txt" {
		t.Fatalf("on disk %v, want a.txt back", entries)
	}

	rem := get("remember")
	margs := map[string]string{"name": "order-16", "kind": "order", "fact": "refunded"}
	if _, err := rem.Execute(ctx, mcpCall("s:1:4:remember", margs)); err != nil {
		t.Fatal(err)
	}
	look, err = rem.(tool.CallReconciler).ReconcileCall(ctx, mcpCall("s:1:4:remember", margs))
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != "order-16" {
		t.Fatalf("remember lookup: %+v, %v", look, err)
	}
	if diff := tool.Differences(rem, mcpCall("", margs).Args, look.Result); len(diff) != 0 {
		t.Fatalf("differences: %v", diff)
	}
	if _, ok := reg.Tool("delete_entities"); ok {
		t.Fatal("an upstream tool not declared is exposed")
	}
}

// A catalogue of MCP tools with mistakes is refused naming every one.
func TestMCPCatalogueRefusedNamingEveryProblem(t *testing.T) {
	src := `version: 1
mcp_servers:
  - {name: fs, command: node, url: "http://x"}
  - {name: remote, url: "ftp://x", args: [a]}
  - {name: local, command: node, env: [{name: API_TOKEN, value: "x"}, {name: "1BAD", from_env: X}], headers: [{name: A, value: b}]}
tools:
  - name: w
    description: d
    class: NON_IDEMPOTENT_WRITE
    timeout: 5s
    system: s
    args: [{name: p, type: string}]
    mcp:
      server: nope
      tool: "bad tool"
      args: {path: "{q}", other: "{original.key}"}
      key: {arg: a, meta: b}
  - name: r
    description: d
    class: READ
    timeout: 5s
    mcp:
      server: local
      tool: read
      lookup: {tool: x, found: {}, absent: {}}
`
	_, err := catalog.ParseWith(catalog.Options{Getenv: func(string) (string, bool) { return "", false }}, catalog.Source{Name: "bad.yaml", Data: []byte(src)})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"mcp_servers[0]: declares both command and url",
		"mcp_servers[1].args: applies only to a stdio server",
		"mcp_servers[1].url: \"ftp://x\" is not an http(s) URL",
		"mcp_servers[2].headers: applies only to an HTTP server",
		"mcp_servers[2].env[0].value: API_TOKEN carries a credential",
		"mcp_servers[2].env[1].name: \"1BAD\" is not an environment variable name",
		"tools[0].system: an mcp tool names its server in mcp.server",
		"tools[0].mcp.server: \"nope\" is not a declared mcp server",
		"tools[0].mcp.tool: \"bad tool\" is not an MCP tool name",
		"tools[0].mcp.args: {original.key} is only for reversal tools",
		"tools[0].mcp.args: {q} is not a declared argument",
		"tools[0].mcp.key: set exactly one of arg",
		"tools[0].mcp.lookup: a write needs a lookup",
		"tools[1].mcp.lookup: a READ tool has nothing to look up",
		"tools[1].mcp.lookup: found and absent are the same test",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
