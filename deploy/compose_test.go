package deploy_test

import (
	"bufio"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/sagaworker"
)

const repoRoot = ".."

// workerEnv is the worker container's environment, exactly.
var workerEnv = []string{
	config.EnvAddress, config.EnvNamespace, config.EnvTLSCert, config.EnvTLSKey, config.EnvTLSCA, config.EnvTLSServer,
	config.EnvTaskQueue, config.EnvLedgerFile, config.EnvSandboxURL, config.EnvCodecKeysFile, config.EnvTools, config.EnvOperators,
	config.EnvDeploymentName, config.EnvBuildID,
}

// secrets is the environment compose needs: only the operators file (the
// secrets themselves are files, see TestComposeNoSecretInEnvironment).
var secrets = []string{"AGENTSAGA_OPERATORS_FILE=/srv/agentsaga/operators.json"}

// load parses and validates docker-compose.yml the way `docker compose` does,
// with only env as the interpolation environment (never the caller's).
func load(t *testing.T, env []string, profiles ...string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(repoRoot, "docker-compose.yml")},
		cli.WithWorkingDirectory(repoRoot),
		cli.WithEnv(env),
		cli.WithProfiles(profiles),
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	return opts.LoadProject(context.Background())
}

func mustLoad(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	p, err := load(t, secrets, profiles...)
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

func TestComposeServicesAndProfiles(t *testing.T) {
	base := mustLoad(t)
	for _, name := range []string{"temporal", "postgres", "temporal-ui", "worker", "codec"} {
		if _, ok := base.Services[name]; !ok {
			t.Errorf("service %q is missing or not enabled by default", name)
		}
	}
	if _, ok := base.Services["sandbox"]; ok {
		t.Errorf("service sandbox runs without the sandbox profile; give it profiles: [sandbox]")
	}
	disabled, ok := base.DisabledServices["sandbox"]
	if !ok {
		t.Fatalf("service sandbox is missing")
	}
	if !slices.Equal(disabled.Profiles, []string{"sandbox"}) {
		t.Errorf("sandbox profiles = %v, want [sandbox]", disabled.Profiles)
	}

	withSandbox := mustLoad(t, "sandbox")
	sb, ok := withSandbox.Services["sandbox"]
	if !ok {
		t.Fatalf("service sandbox is not enabled by --profile sandbox")
	}
	if got, want := []string(sb.Entrypoint), []string{"/app/starter"}; !slices.Equal(got, want) {
		t.Errorf("sandbox entrypoint = %q, want %q", got, want)
	}
	if got, want := []string(sb.Command), []string{"sandbox", "serve", "--addr", "0.0.0.0:8090"}; !slices.Equal(got, want) {
		t.Errorf("sandbox command = %q, want %q", got, want)
	}
	for _, name := range []string{"worker", "sandbox"} {
		b := withSandbox.Services[name].Build
		if b == nil {
			t.Errorf("service %s has no build section; it must build the repository's Dockerfile", name)
			continue
		}
		root, _ := filepath.Abs(repoRoot)
		if filepath.Clean(b.Context) != root || b.Dockerfile != "Dockerfile" {
			t.Errorf("service %s builds %s from %s, want Dockerfile from the repository root %s", name, b.Dockerfile, b.Context, root)
		}
	}
}

func TestComposePublishedPorts(t *testing.T) {
	p := mustLoad(t, "sandbox")
	for _, c := range []struct {
		service         string
		published, port uint32
	}{
		{"temporal", 7233, 7233},
		{"temporal-ui", 8233, 8080},
		{"codec", 8234, 8234},
		{"sandbox", 8090, 8090},
	} {
		svc, ok := p.Services[c.service]
		if !ok {
			t.Errorf("service %s is missing", c.service)
			continue
		}
		found := slices.ContainsFunc(svc.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Published == strconv.FormatUint(uint64(c.published), 10) && pc.Target == c.port
		})
		if !found {
			t.Errorf("service %s does not publish host port %d to container port %d (ports: %+v)", c.service, c.published, c.port, svc.Ports)
		}
	}
	// Nothing is published on all interfaces unless the operator says so.
	for name, svc := range p.Services {
		for _, pc := range svc.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes port %s on %q: bind it to 127.0.0.1 (AGENTSAGA_BIND)", name, pc.Published, pc.HostIP)
			}
		}
	}
}

// The UI cannot act (cancel, terminate, signal, reset) without a login, it
// reads payloads through the codec server, and the ledger is not the
// database superuser.
func TestComposeSecurityShape(t *testing.T) {
	p := mustLoad(t)
	ui := p.Services["temporal-ui"].Environment
	if v := ui["TEMPORAL_DISABLE_WRITE_ACTIONS"]; v == nil || *v != "true" {
		t.Errorf("temporal-ui must run with TEMPORAL_DISABLE_WRITE_ACTIONS=true")
	}
	if v := ui["TEMPORAL_CODEC_ENDPOINT"]; v == nil || *v != "https://localhost:8234" {
		t.Errorf("temporal-ui must use the codec server at https://localhost:8234")
	}
	codecSvc := p.Services["codec"]
	if got := []string(codecSvc.Command); len(got) < 2 || got[0] != "codec" || got[1] != "serve" {
		t.Errorf("codec service runs %q, want starter codec serve", got)
	}
	init := p.Services["postgres"].Volumes
	if !slices.ContainsFunc(init, func(v types.ServiceVolumeConfig) bool {
		return strings.HasSuffix(v.Source, "deploy/postgres/init-roles.sh")
	}) {
		t.Errorf("postgres must mount deploy/postgres/init-roles.sh to create the temporal and agentsaga roles")
	}
}

// Issue 35, item 9: the UI's every write action is off, each by its own
// switch as well as the global one (a terminate skips the saga's
// reversals), and the UI fetches no news feed from outside.
func TestComposeUIIsReadOnlyAndQuiet(t *testing.T) {
	ui := mustLoad(t).Services["temporal-ui"].Environment
	for _, k := range []string{
		"TEMPORAL_DISABLE_WRITE_ACTIONS", "TEMPORAL_WORKFLOW_TERMINATE_DISABLED", "TEMPORAL_WORKFLOW_RESET_DISABLED",
		"TEMPORAL_WORKFLOW_SIGNAL_DISABLED", "TEMPORAL_WORKFLOW_UPDATE_DISABLED", "TEMPORAL_WORKFLOW_CANCEL_DISABLED",
		"TEMPORAL_WORKFLOW_PAUSE_DISABLED", "TEMPORAL_START_WORKFLOW_DISABLED", "TEMPORAL_BATCH_ACTIONS_DISABLED",
		"TEMPORAL_ACTIVITY_COMMANDS_DISABLED", "TEMPORAL_DISABLE_NEWS_FETCH",
	} {
		if v := ui[k]; v == nil || *v != "true" {
			t.Errorf("temporal-ui must run with %s=true (ui-server v2.54.1, config/docker.yaml)", k)
		}
	}
	if v := ui["TEMPORAL_FEEDBACK_URL"]; v != nil && *v != "" {
		t.Errorf("temporal-ui sets TEMPORAL_FEEDBACK_URL=%q: leave the link to the UI's default", *v)
	}
}

func TestComposeWorkerEnvironment(t *testing.T) {
	p := mustLoad(t)
	env := p.Services["worker"].Environment
	names := slices.Sorted(maps.Keys(env))
	if want := slices.Sorted(slices.Values(workerEnv)); !slices.Equal(names, want) {
		t.Errorf("worker environment names = %v, want exactly %v", names, want)
	}
	// Every name must be one the worker reads.
	for _, name := range names {
		if !slices.Contains(config.EnvNames(), name) {
			t.Errorf("worker environment has %s, which package config does not read (config.EnvNames)", name)
		}
	}

	get := func(name string) string {
		if v := env[name]; v != nil {
			return *v
		}
		t.Errorf("worker environment %s has no value", name)
		return ""
	}
	if got := get(config.EnvAddress); got != "temporal:7233" {
		t.Errorf("%s = %q, want temporal:7233 (the temporal service)", config.EnvAddress, got)
	}
	if got := get(config.EnvNamespace); got != config.DefaultNamespace {
		t.Errorf("%s = %q, want %q by default", config.EnvNamespace, got, config.DefaultNamespace)
	}
	if got := get(config.EnvTaskQueue); got != config.DefaultTaskQueue {
		t.Errorf("%s = %q, want %q by default", config.EnvTaskQueue, got, config.DefaultTaskQueue)
	}
	if got := get(config.EnvLedgerFile); got != "/run/secrets/ledger_dsn" {
		t.Errorf("%s = %q, want the mounted secret /run/secrets/ledger_dsn", config.EnvLedgerFile, got)
	}
	if got := get(config.EnvSandboxURL); got != "http://sandbox:8090" {
		t.Errorf("%s = %q, want http://sandbox:8090 (the sandbox service) by default", config.EnvSandboxURL, got)
	}
}

func TestComposeRequiresOperatorsFile(t *testing.T) {
	if _, err := load(t, nil); err == nil || !strings.Contains(err.Error(), "AGENTSAGA_OPERATORS_FILE") {
		t.Errorf("loading without AGENTSAGA_OPERATORS_FILE: err = %v, want an error naming it", err)
	}
}

// TestDockerfile checks the Dockerfile the worker and sandbox services build:
// a Go build stage on the toolchain go.mod names that builds ./worker and
// ./starter, and a runtime stage with both in /app that runs as a non-root user.
func TestDockerfile(t *testing.T) {
	lines := dockerfileInstructions(t, filepath.Join(repoRoot, "Dockerfile"))

	goVersion := goModVersion(t)
	var stages [][]string
	for _, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], l)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	build, runtime := stages[0], stages[len(stages)-1]
	if from := build[0]; !strings.Contains(from, "golang:"+goVersion) {
		t.Errorf("build stage %q does not use golang:%s, the version in go.mod", from, goVersion)
	}
	buildText := strings.Join(build, "\n")
	for _, pkg := range []string{"./worker", "./starter"} {
		if !strings.Contains(buildText, "go build") || !strings.Contains(buildText, pkg) {
			t.Errorf("build stage does not go build %s", pkg)
		}
	}
	runtimeText := strings.Join(runtime, "\n")
	for _, bin := range []string{"worker", "starter"} {
		if !strings.Contains(runtimeText, "/out/"+bin) || !strings.Contains(runtimeText, "/app/") {
			t.Errorf("runtime stage does not copy %s into /app", bin)
		}
	}
	user := ""
	for _, l := range runtime {
		if u, ok := strings.CutPrefix(l, "USER "); ok {
			user = strings.TrimSpace(u)
		}
	}
	if user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") || strings.HasPrefix(user, "root:") {
		t.Errorf("runtime stage runs as %q, want a non-root USER", user)
	}
	if !slices.Contains(runtime, `ENTRYPOINT ["/app/worker"]`) {
		t.Errorf(`runtime stage lacks ENTRYPOINT ["/app/worker"]`)
	}
}

// dockerfileInstructions returns the Dockerfile's instructions with comments
// dropped and continuation lines joined.
func dockerfileInstructions(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the compose file builds %s: %v", path, err)
	}
	defer f.Close()
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if more, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(more + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return out
}

func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatalf("read go.mod: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("go.mod has no go line")
	return ""
}

// The worker's container gets the time a graceful stop needs: docker
// compose's SIGKILL must not cut off tool calls the worker lets finish
// (sagaworker.StopTimeout of the tools it runs), with a few seconds to exit.
func TestComposeWorkerStopGracePeriod(t *testing.T) {
	tools, err := demotools.Registry(demotools.SandboxConfig("http://sandbox:8090"))
	if err != nil {
		t.Fatalf("demo tools: %v", err)
	}
	want := sagaworker.StopTimeout(tools.Specs()) + 5*time.Second
	grace := mustLoad(t).Services["worker"].StopGracePeriod
	if grace == nil {
		t.Fatalf("worker has no stop_grace_period: docker compose kills it 10s after SIGTERM; give it at least %s", want)
	}
	if got := time.Duration(*grace); got < want {
		t.Errorf("worker stop_grace_period = %s, want at least %s (sagaworker.StopTimeout plus 5s to exit)", got, want)
	}
}
