package devserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/internal/devserver"
)

// Names like the product's; the tests only need a keyword and a bool.
var (
	sessionAttr = temporal.NewSearchAttributeKeyKeyword("TestSession")
	humanAttr   = temporal.NewSearchAttributeKeyBool("TestNeedsHuman")
	testAttrs   = map[string]enums.IndexedValueType{
		sessionAttr.GetName(): enums.INDEXED_VALUE_TYPE_KEYWORD,
		humanAttr.GetName():   enums.INDEXED_VALUE_TYPE_BOOL,
	}
)

func greet(ctx workflow.Context, name string) (string, error) {
	return "hello " + name, nil
}

// testLogger sends the server's warnings to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func start(t *testing.T, opts devserver.Options) *devserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	s, err := devserver.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v (frontend %s, UI %q)", time.Since(began).Round(time.Millisecond), s.FrontendAddr(), s.UIURL())
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func dial(t *testing.T, s *devserver.Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  s.FrontendAddr(),
		Namespace: s.Namespace(),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.FrontendAddr(), err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestStartInMemory runs two in-memory servers side by side, one with the UI,
// and checks each runs a workflow that carries the registered search attributes.
func TestStartInMemory(t *testing.T) {
	codecURL := "http://127.0.0.1:1/codec-for-test"
	withUI := start(t, devserver.Options{SearchAttributes: testAttrs, Logger: testLogger(t),
		UICodec: devserver.UICodec{Endpoint: codecURL, IncludeCredentials: true}})
	headless := start(t, devserver.Options{UIPort: devserver.NoUI, Namespace: "second", SearchAttributes: testAttrs, Logger: testLogger(t)})

	if withUI.FrontendAddr() == headless.FrontendAddr() {
		t.Fatalf("both servers claim frontend %s", withUI.FrontendAddr())
	}
	if got := headless.UIURL(); got != "" {
		t.Errorf("UIURL() without UI = %q, want empty", got)
	}
	if got := withUI.Namespace(); got != devserver.DefaultNamespace {
		t.Errorf("Namespace() = %q, want %q", got, devserver.DefaultNamespace)
	}

	for _, s := range []*devserver.Server{withUI, headless} {
		c := dial(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace()})
		if err != nil {
			t.Fatalf("%s: ListSearchAttributes: %v", s.Namespace(), err)
		}
		for name, want := range testAttrs {
			if got := list.GetCustomAttributes()[name]; got != want {
				t.Errorf("%s: search attribute %s has type %v, want %v", s.Namespace(), name, got, want)
			}
		}

		w := worker.New(c, "devserver-test", worker.Options{})
		w.RegisterWorkflow(greet)
		if err := w.Start(); err != nil {
			t.Fatalf("worker start: %v", err)
		}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID:                    "greet-" + s.Namespace(),
			TaskQueue:             "devserver-test",
			TypedSearchAttributes: temporal.NewSearchAttributes(sessionAttr.ValueSet("s-1"), humanAttr.ValueSet(true)),
		}, greet, "saga")
		if err != nil {
			w.Stop()
			t.Fatalf("%s: ExecuteWorkflow: %v", s.Namespace(), err)
		}
		var got string
		err = run.Get(ctx, &got)
		w.Stop()
		if err != nil || got != "hello saga" {
			t.Fatalf("%s: workflow result = %q, %v; want %q", s.Namespace(), got, err, "hello saga")
		}
		desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
		if err != nil {
			t.Fatalf("%s: DescribeWorkflowExecution: %v", s.Namespace(), err)
		}
		if _, ok := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[sessionAttr.GetName()]; !ok {
			t.Errorf("%s: workflow lacks search attribute %s", s.Namespace(), sessionAttr.GetName())
		}
	}

	resp, err := http.Get(withUI.UIURL() + "/")
	if err != nil {
		t.Fatalf("GET UI: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/ = %s, want 200", withUI.UIURL(), resp.Status)
	}

	// DNS rebinding: a request on loopback naming a foreign Host is
	// refused by the UI and by the frontend's HTTP API, before any
	// handler; the same request naming the server's own address works.
	for _, u := range []string{withUI.UIURL() + "/api/v1/settings", "http://" + withUI.FrontendHTTPAddr() + "/api/v1/namespaces"} {
		if got := statusWithHost(t, u, "rebound.evil.example"); got != http.StatusForbidden {
			t.Errorf("GET %s with a foreign Host = %d, want 403", u, got)
		}
		if got := statusWithHost(t, u, ""); got != http.StatusOK {
			t.Errorf("GET %s with its own Host = %d, want 200", u, got)
		}
	}

	// The UI hands the browser the codec endpoint it was given.
	resp, err = http.Get(withUI.UIURL() + "/api/v1/settings")
	if err != nil {
		t.Fatalf("GET UI settings: %v", err)
	}
	defer resp.Body.Close()
	var settings struct {
		Codec struct {
			Endpoint           string
			IncludeCredentials bool
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&settings); err != nil {
		t.Fatalf("UI settings: %v", err)
	}
	if settings.Codec.Endpoint != codecURL || !settings.Codec.IncludeCredentials {
		t.Errorf("UI codec settings %+v, want endpoint %s with credentials", settings.Codec, codecURL)
	}
}

// TestStartRefusesBusyPort checks that a taken frontend port is reported,
// naming the option to change, before anything starts.
func TestStartRefusesBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s, err := devserver.Start(context.Background(), devserver.Options{Port: port, UIPort: devserver.NoUI})
	if err == nil {
		s.Stop()
		t.Fatalf("Start on busy port %d succeeded; want an error", port)
	}
	if !strings.Contains(err.Error(), "not free") || !strings.Contains(err.Error(), "Options.Port") {
		t.Errorf("Start on busy port: %v; want an error saying the port is not free and naming Options.Port", err)
	}
}

// TestServeMetrics serves the server's own metrics on a free loopback port
// and finds the frontend's requests among them; without ServeMetrics there
// is no endpoint.
func TestServeMetrics(t *testing.T) {
	s := start(t, devserver.Options{UIPort: devserver.NoUI, ServeMetrics: true})
	if !strings.HasPrefix(s.MetricsURL(), "http://127.0.0.1:") || !strings.HasSuffix(s.MetricsURL(), "/metrics") {
		t.Fatalf("MetricsURL() = %q; want http://127.0.0.1:<port>/metrics", s.MetricsURL())
	}
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace()}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.MetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `operation="DescribeNamespace"`) {
		t.Fatalf("GET %s: %s, %d bytes; want 200 with the frontend's DescribeNamespace requests counted", s.MetricsURL(), resp.Status, len(body))
	}
	if off := start(t, devserver.Options{UIPort: devserver.NoUI}); off.MetricsURL() != "" {
		t.Errorf("MetricsURL() without ServeMetrics = %q; want empty", off.MetricsURL())
	}
}

// TestMetricsPortIsChecked refuses a metrics port out of range, and one
// given without ServeMetrics (it would silently serve nothing).
func TestMetricsPortIsChecked(t *testing.T) {
	for _, o := range []devserver.Options{
		{ServeMetrics: true, MetricsPort: -1},
		{ServeMetrics: true, MetricsPort: 70000},
		{MetricsPort: 9090},
	} {
		s, err := devserver.Start(context.Background(), o)
		if err == nil {
			s.Stop()
			t.Fatalf("Start(%+v) succeeded; want an error", o)
		}
		if !strings.Contains(err.Error(), "etrics") {
			t.Errorf("Start(%+v): %v; want an error naming the metrics port", o, err)
		}
	}
}

const (
	helperEnv  = "DEVSERVER_TEST_FIRST_RUN_DIR"
	persistWID = "survives-restart"
)

// TestDataDirSurvivesRestart starts a workflow in another process on a data
// directory, then starts a server on the same directory here and finds it.
// The second start also adds a search attribute to the existing namespace.
func TestDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFirstRun$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("first run failed: %v\n%s", err, out)
	}
	runID := ""
	for _, line := range strings.Split(string(out), "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "RUN_ID="); ok {
			runID = id
		}
	}
	if runID == "" {
		t.Fatalf("first run printed no RUN_ID:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, devserver.DatabaseFile)); err != nil {
		t.Fatalf("no database file after the first run: %v", err)
	}

	extra := temporal.NewSearchAttributeKeyInt64("TestAttempt")
	attrs := map[string]enums.IndexedValueType{extra.GetName(): enums.INDEXED_VALUE_TYPE_INT}
	for k, v := range testAttrs {
		attrs[k] = v
	}
	s := start(t, devserver.Options{DataDir: dir, UIPort: devserver.NoUI, SearchAttributes: attrs, Logger: testLogger(t)})
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	desc, err := c.DescribeWorkflowExecution(ctx, persistWID, runID)
	if err != nil {
		t.Fatalf("DescribeWorkflowExecution after restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("workflow status after restart = %v, want RUNNING", st)
	}
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace()})
	if err != nil {
		t.Fatalf("ListSearchAttributes: %v", err)
	}
	for name, want := range attrs {
		if got := list.GetCustomAttributes()[name]; got != want {
			t.Errorf("search attribute %s has type %v after restart, want %v", name, got, want)
		}
	}
	// A second server on the same directory in this process is refused.
	if other, err := devserver.Start(ctx, devserver.Options{DataDir: dir, UIPort: devserver.NoUI}); err == nil {
		other.Stop()
		t.Errorf("a second Start on the data directory in use succeeded; want an error")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Errorf("second Start on the same data directory: %v; want an error saying it is in use", err)
	}

	// The attribute added on this start is usable right away.
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    "uses-new-attribute",
		TaskQueue:             "nobody-listens",
		TypedSearchAttributes: temporal.NewSearchAttributes(extra.ValueSet(2)),
	}, "AnyWorkflow"); err != nil {
		t.Fatalf("start a workflow with the new attribute: %v", err)
	}
}

// TestHelperFirstRun is the first process of TestDataDirSurvivesRestart; it
// does nothing unless that test runs it.
func TestHelperFirstRun(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("skipped because it is only the child process of TestDataDirSurvivesRestart")
	}
	s := start(t, devserver.Options{DataDir: dir, UIPort: devserver.NoUI, SearchAttributes: testAttrs, Logger: testLogger(t)})
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// No worker polls this queue, so the workflow stays running across the restart.
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: persistWID, TaskQueue: "nobody-listens"}, "AnyWorkflow")
	if err != nil {
		t.Fatalf("ExecuteWorkflow: %v", err)
	}
	fmt.Printf("RUN_ID=%s\n", run.GetRunID())
}

// statusWithHost GETs u with Host header host ("" for u's own) and returns
// the status code.
func statusWithHost(t *testing.T, u, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
