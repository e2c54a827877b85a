package mcptool_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/mcptool"
	"github.com/agentsaga/agentsaga/mcptool/mcptest"
	"github.com/agentsaga/agentsaga/tool"
)

func template(t *testing.T, js string) *mcptool.Template {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	tp, err := mcptool.NewTemplate(v)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// filesystem starts the real @modelcontextprotocol/server-filesystem on a
// fresh directory (its one allowed directory), with d dropping answers.
func filesystem(t *testing.T, d *mcptest.Dropper) (*mcptool.Server, string) {
	t.Helper()
	node, script := mcptest.Upstream(t, mcptest.Filesystem)
	dir := mcptest.Dir(t)
	s := &mcptool.Server{Name: "filesystem", Command: node, Args: []string{script, dir}}
	if d != nil {
		s.WrapConnection = d.Wrap
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

func strArgs(names ...string) tool.Schema {
	var fs []tool.Field
	for _, n := range names {
		fs = append(fs, tool.Field{Name: n, Type: tool.String, Required: true, MaxLen: 4096})
	}
	return tool.Schema{Fields: fs}
}

func writeFile(s *mcptool.Server) *mcptool.Tool {
	return &mcptool.Tool{
		Def: tool.Spec{Name: "fs_write", System: "filesystem", Class: tool.IdempotentWrite, Timeout: 30 * time.Second,
			Args: strArgs("path", "content"), NoLookup: true},
		Server: s, Upstream: "write_file", KeyMeta: "agentsaga/key",
	}
}

func moveFile(t *testing.T, s *mcptool.Server) *mcptool.Tool {
	return &mcptool.Tool{
		Def: tool.Spec{Name: "fs_move", System: "filesystem", Class: tool.NonIdempotentWrite, Timeout: 30 * time.Second,
			Args: strArgs("source", "destination")},
		Server: s, Upstream: "move_file", KeyMeta: "agentsaga/key",
		Lookup: &mcptool.Lookup{
			Upstream:      "get_file_info",
			Args:          template(t, `{"path": "{destination}"}`),
			Found:         mcptool.Test{TextContains: "isFile: true"},
			Absent:        mcptool.Test{Error: true, TextContains: "ENOENT"},
			Authoritative: true,
		},
	}
}

func call(key string, args any) tool.Call {
	b, _ := json.Marshal(args)
	return tool.Call{Key: key, Args: b, Attempt: 1}
}

func TestWriteFileIsAnIdempotentWrite(t *testing.T) {
	s, dir := filesystem(t, nil)
	w := mcptool.New(writeFile(s))
	if _, err := tool.NewRegistry(w); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := filepath.Join(dir, "note.txt")
	for i := range 3 {
		if _, err := w.Execute(ctx, call("s:1:1:fs_write", map[string]string{"path": p, "content": "hello"})); err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "hello" {
		t.Fatalf("on disk: %q, %v; want hello", b, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files on disk, want 1", len(entries))
	}
	// Outside the allowed directory: the upstream refuses, final.
	_, err = w.Execute(ctx, call("s:1:2:fs_write", map[string]string{"path": "/etc/agentsaga-nope", "content": "x"}))
	if tool.KindOf(err) != tool.KindRejected {
		t.Fatalf("write outside the allowed directory: %v (kind %s), want rejected", err, tool.KindOf(err))
	}
}

// TestMoveFileLostAnswerIsReconciled: the upstream moves the file, its answer
// is lost and the process goes away; the call is UNKNOWN, get_file_info
// finds the effect, and there is one moved file on disk.
func TestMoveFileLostAnswerIsReconciled(t *testing.T) {
	var d mcptest.Dropper
	s, dir := filesystem(t, &d)
	mv := mcptool.New(moveFile(t, s))
	ctx := context.Background()
	src, dst := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	if err := os.WriteFile(src, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := map[string]string{"source": src, "destination": dst}
	rc := mv.(tool.CallReconciler)
	before, err := rc.ReconcileCall(ctx, call("s:1:1:fs_move", args))
	if err != nil || before.Status != tool.Absent || !before.Authoritative {
		t.Fatalf("before the move: %+v, %v; want an authoritative absent", before, err)
	}
	d.Arm("move_file", 1)
	_, err = mv.Execute(ctx, call("s:1:1:fs_move", args))
	if tool.KindOf(err) != tool.KindUnknown || d.Dropped() != 1 {
		t.Fatalf("lost answer: %v (kind %s, dropped %d), want unknown", err, tool.KindOf(err), d.Dropped())
	}
	look, err := rc.ReconcileCall(ctx, call("s:1:1:fs_move", args))
	if err != nil || look.Status != tool.Found {
		t.Fatalf("reconcile after the lost answer: %+v, %v; want found", look, err)
	}
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Fatalf("source still there: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "b.txt" {
		t.Fatalf("on disk %v, want only b.txt", entries)
	}
	// Sent again blindly, the move fails (the source is gone): this is what
	// reconcile before retry spares the saga.
	_, err = mv.Execute(ctx, call("s:1:1:fs_move", args))
	if tool.KindOf(err) != tool.KindRejected {
		t.Fatalf("second move: %v, want rejected", err)
	}
}

func TestNotStartedIsNotSent(t *testing.T) {
	s := &mcptool.Server{Name: "nothing", Command: filepath.Join(t.TempDir(), "no-such-server")}
	w := mcptool.New(writeFile(s))
	_, err := w.Execute(context.Background(), call("s:1:1:fs_write", map[string]string{"path": "/tmp/x", "content": "x"}))
	if tool.KindOf(err) != tool.KindNotSent {
		t.Fatalf("a server that does not start: %v (kind %s), want not_sent", err, tool.KindOf(err))
	}
}

func TestMemoryCreateEntitiesOnce(t *testing.T) {
	node, script := mcptest.Upstream(t, mcptest.Memory)
	dir := mcptest.Dir(t)
	mem := filepath.Join(dir, "memory.jsonl")
	var d mcptest.Dropper
	s := &mcptool.Server{Name: "memory", Command: node, Args: []string{script}, Env: []string{"MEMORY_FILE_PATH=" + mem}, WrapConnection: d.Wrap}
	t.Cleanup(func() { _ = s.Close() })
	create := mcptool.New(&mcptool.Tool{
		Def: tool.Spec{Name: "remember", System: "memory", Class: tool.NonIdempotentWrite, Timeout: 30 * time.Second,
			Args:  strArgs("name", "kind", "fact"),
			Match: []tool.MatchField{{Arg: "name", Result: "name"}, {Arg: "kind", Result: "entityType"}}},
		Server: s, Upstream: "create_entities", KeyMeta: "agentsaga/key",
		Args: template(t, `{"entities":[{"name":"{name}","entityType":"{kind}","observations":["{fact}","agentsaga key {key}"]}]}`),
		Lookup: &mcptool.Lookup{
			Upstream: "open_nodes", Args: template(t, `{"names":["{name}"]}`),
			Found: mcptool.Test{NonEmpty: "/entities"}, Absent: mcptool.Test{Empty: "/entities"},
			Authoritative: true, Item: "/entities/0", ExternalID: "/name",
		},
	})
	ctx := context.Background()
	args := map[string]string{"name": "order-16", "kind": "order", "fact": "refunded once"}
	d.Arm("create_entities", 1)
	_, err := create.Execute(ctx, call("s:1:1:remember", args))
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("lost answer: %v, want unknown", err)
	}
	look, err := create.(tool.CallReconciler).ReconcileCall(ctx, call("s:1:1:remember", args))
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != "order-16" {
		t.Fatalf("reconcile: %+v, %v; want found order-16", look, err)
	}
	if diff := tool.Differences(create, call("", args).Args, look.Result); len(diff) > 0 {
		t.Fatalf("the effect found does not match its call: %v", diff)
	}
	other := map[string]string{"name": "order-16", "kind": "invoice", "fact": "x"}
	if diff := tool.Differences(create, call("", other).Args, look.Result); len(diff) == 0 {
		t.Fatal("an effect made with another kind matched")
	}
	// The graph read back: one entity, made once.
	graph := readGraph(ctx, t, s)
	if len(graph.Entities) != 1 || graph.Entities[0].Name != "order-16" {
		t.Fatalf("graph holds %+v, want one entity order-16", graph.Entities)
	}
}

type graph struct {
	Entities []struct {
		Name         string   `json:"name"`
		EntityType   string   `json:"entityType"`
		Observations []string `json:"observations"`
	} `json:"entities"`
}

func readGraph(ctx context.Context, t *testing.T, s *mcptool.Server) graph {
	t.Helper()
	read := mcptool.New(&mcptool.Tool{
		Def:    tool.Spec{Name: "read_graph", Class: tool.Read, Timeout: 30 * time.Second},
		Server: s, Upstream: "read_graph",
	})
	res, err := read.Execute(ctx, call("s:9:9:read_graph", map[string]string{}))
	if err != nil {
		t.Fatalf("read_graph: %v", err)
	}
	var g graph
	if err := json.Unmarshal(res.Data, &g); err != nil {
		t.Fatalf("read_graph answer %s: %v", res.Data, err)
	}
	return g
}
