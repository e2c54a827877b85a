package deploy_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/tlscerts"
	"github.com/agentsaga/agentsaga/ledger"
)

const secretsDir = "/run/secrets/"

// allProfiles loads every service, the setup jobs included.
func allProfiles(t *testing.T) *types.Project {
	t.Helper()
	return mustLoad(t, "sandbox", "metrics", "setup")
}

// secretLike says whether an environment variable's name says it holds a
// secret rather than where one is.
var secretLike = regexp.MustCompile(`(?i)(PASSWORD|PWD|TOKEN|SECRET|KEYS|API_KEY|DSN|PRIVATE)`)

// TestComposeNoSecretInEnvironment: no environment value of any service is
// a secret: every secret is a top-level file-based secret, mounted under
// /run/secrets, and what names a secret in the environment is a path there.
// Secrets put in the caller's environment do not reach any container.
func TestComposeNoSecretInEnvironment(t *testing.T) {
	env := append(slices.Clone(secrets),
		"POSTGRES_PASSWORD=leak-1", "AGENTSAGA_LEDGER_PASSWORD=leak-2", "AGENTSAGA_CODEC_KEYS=leak-3",
		"AGENTSAGA_CODEC_TOKEN=leak-4", "GRAFANA_ADMIN_PASSWORD=leak-5", "AGENTSAGA_LEDGER=postgres://a:leak-6@x/y")
	p, err := load(t, env, "sandbox", "metrics", "setup")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"postgres_password", "temporal_db_password", "ledger_owner_password", "ledger_app_password", "ledger_owner_dsn", "ledger_dsn", "codec_keys", "codec_token", "grafana_admin_password"} {
		sec, ok := p.Secrets[s]
		if !ok || sec.File == "" {
			t.Errorf("top-level secret %s is missing or not file-based (%+v)", s, sec)
		}
	}
	for _, s := range p.Secrets {
		if s.Environment != "" {
			t.Errorf("secret %s is read from the environment variable %s; make it a file", s.Name, s.Environment)
		}
	}
	for name, svc := range p.Services {
		mounted := map[string]bool{}
		for _, s := range svc.Secrets {
			mounted[s.Source] = true
		}
		for k, v := range svc.Environment {
			if v == nil {
				continue
			}
			if strings.Contains(*v, "leak-") {
				t.Errorf("service %s: %s carries a secret from the caller's environment", name, k)
			}
			if slices.Contains(config.SecretEnvNames(), k) {
				t.Errorf("service %s sets %s, which holds a secret inline; use its _FILE form", name, k)
			}
			if secretLike.MatchString(k) && !strings.HasSuffix(k, "_FILE") && !strings.HasPrefix(*v, secretsDir) {
				t.Errorf("service %s: %s=%q looks like a secret in the environment; mount a secret file and give its path", name, k, *v)
			}
			if regexp.MustCompile(`://[^/@\s]+:[^/@\s]+@`).MatchString(*v) {
				t.Errorf("service %s: %s holds a URL with a password", name, k)
			}
			if rest, ok := strings.CutPrefix(*v, secretsDir); ok && !mounted[rest] {
				t.Errorf("service %s: %s=%s names a secret the service does not mount", name, k, *v)
			}
		}
	}
}

// TestComposeMutualTLS: the frontend requires client certificates of the
// CA; every client of it (worker, cluster setup, UI) presents its own; the
// certificate files are the ones `starter cluster certs` writes, by the
// setup job on the product's own image, each key given to its container.
func TestComposeMutualTLS(t *testing.T) {
	p := allProfiles(t)
	env := func(svc, k string) string {
		if v := p.Services[svc].Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	tsvc := "temporal"
	if env(tsvc, "TEMPORAL_TLS_REQUIRE_CLIENT_AUTH") != "true" {
		t.Errorf("temporal must run with TEMPORAL_TLS_REQUIRE_CLIENT_AUTH=true (mTLS)")
	}
	for k, want := range map[string]string{
		"TEMPORAL_TLS_FRONTEND_CERT": "tls_temporal_cert", "TEMPORAL_TLS_FRONTEND_KEY": "tls_temporal_key",
		"TEMPORAL_TLS_CLIENT1_CA_CERT": "tls_ca", "TEMPORAL_TLS_SERVER_CERT": "tls_temporal_cert",
		"TEMPORAL_TLS_SERVER_KEY": "tls_temporal_key", "TEMPORAL_TLS_SERVER_CA_CERT": "tls_ca",
	} {
		if got := env(tsvc, k); got != secretsDir+want {
			t.Errorf("temporal %s = %q, want %s%s", k, got, secretsDir, want)
		}
	}
	clients := map[string]string{"worker": "worker", "temporal-namespace": "starter"}
	for svc, id := range clients {
		for k, want := range map[string]string{
			config.EnvTLSCert: "tls_" + id + "_cert", config.EnvTLSKey: "tls_" + id + "_key", config.EnvTLSCA: "tls_ca",
		} {
			if got := env(svc, k); got != secretsDir+want {
				t.Errorf("%s %s = %q, want %s%s", svc, k, got, secretsDir, want)
			}
		}
		if got := env(svc, config.EnvTLSServer); got != "temporal" {
			t.Errorf("%s %s = %q, want temporal (the SAN of the server certificate)", svc, config.EnvTLSServer, got)
		}
		if got := env(svc, config.EnvAddress); got != "temporal:7233" {
			t.Errorf("%s %s = %q, want temporal:7233", svc, config.EnvAddress, got)
		}
	}
	for k, want := range map[string]string{"TEMPORAL_TLS_CERT": "tls_ui_cert", "TEMPORAL_TLS_KEY": "tls_ui_key", "TEMPORAL_TLS_CA": "tls_ca"} {
		if got := env("temporal-ui", k); got != secretsDir+want {
			t.Errorf("temporal-ui %s = %q, want %s%s", k, got, secretsDir, want)
		}
	}
	if env("temporal-ui", "TEMPORAL_TLS_ENABLE_HOST_VERIFICATION") != "true" {
		t.Errorf("temporal-ui must verify the frontend's certificate (TEMPORAL_TLS_ENABLE_HOST_VERIFICATION=true)")
	}
	// The codec server serves HTTPS with its certificate; the UI calls https.
	if env("codec", "AGENTSAGA_CODEC_TLS_CERT") != secretsDir+"tls_codec_cert" || env("codec", "AGENTSAGA_CODEC_TLS_KEY") != secretsDir+"tls_codec_key" {
		t.Errorf("codec must serve HTTPS with the tls_codec_cert/tls_codec_key secrets")
	}
	if got := env("temporal-ui", "TEMPORAL_CODEC_ENDPOINT"); !strings.HasPrefix(got, "https://") {
		t.Errorf("temporal-ui codec endpoint %q, want https://", got)
	}

	// The TLS secret files are the names cluster certs writes.
	root := abs(t)
	want := map[string]bool{"tls_ca": true}
	for _, id := range tlscerts.Compose {
		want["tls_"+id.Name+"_cert"], want["tls_"+id.Name+"_key"] = true, true
	}
	for name := range want {
		s, ok := p.Secrets[name]
		if !ok {
			t.Errorf("secret %s is missing", name)
			continue
		}
		base := strings.TrimSuffix(strings.TrimPrefix(name, "tls_"), "_cert")
		base = strings.TrimSuffix(base, "_key")
		ext := ".pem"
		if strings.HasSuffix(name, "_key") {
			ext = ".key"
		}
		if s.File != filepath.Join(root, "secrets", "tls", base+ext) {
			t.Errorf("secret %s is %s, want secrets/tls/%s%s (what cluster certs writes)", name, s.File, base, ext)
		}
	}
	certs, ok := p.Services["certs"]
	if !ok {
		t.Fatalf("the certs setup job is missing")
	}
	if !slices.Equal(certs.Profiles, []string{"setup"}) || certs.Image != "agentsaga:local" {
		t.Errorf("certs: profiles %v image %s, want profile setup on the product's own image", certs.Profiles, certs.Image)
	}
	cmd := strings.Join(certs.Command, " ")
	if !strings.HasPrefix(cmd, "cluster certs --out /tls") {
		t.Errorf("certs runs %q, want starter cluster certs --out /tls", cmd)
	}
	for _, id := range tlscerts.Compose {
		if !strings.Contains(cmd, "--owner "+id.Name+"=") {
			t.Errorf("certs does not give %s's key to its container's user (--owner %s=UID)", id.Name, id.Name)
		}
	}
	if !slices.ContainsFunc(certs.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Target == "/tls" && v.Source == filepath.Join(root, "secrets", "tls")
	}) {
		t.Errorf("certs must write into secrets/tls, where the secrets are read from")
	}
}

// TestComposeDatabaseRoles: Temporal connects as its own role, not the
// superuser; the roles are made by the init script, without superuser or
// create rights; the schema job does not create databases.
func TestComposeDatabaseRoles(t *testing.T) {
	p := mustLoad(t)
	pg := p.Services["postgres"].Environment
	if v := pg["POSTGRES_USER"]; v == nil || *v != "postgres" {
		t.Errorf("postgres' superuser must be postgres, used by no other service")
	}
	if v := p.Services["temporal"].Environment["POSTGRES_USER"]; v == nil || *v != "temporal" {
		t.Errorf("temporal must connect as its role temporal")
	}
	schema := strings.Join(p.Services["temporal-schema"].Command, " ")
	if !strings.Contains(schema, "-u temporal") || strings.Contains(schema, " create") {
		t.Errorf("temporal-schema must run as temporal and not create databases: %s", schema)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/postgres/init-roles.sh"))
	if err != nil {
		t.Fatal(err)
	}
	sql := string(b)
	for _, want := range []string{
		"CREATE ROLE temporal LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
		"CREATE DATABASE temporal OWNER temporal", "CREATE DATABASE temporal_visibility OWNER temporal",
		"CREATE ROLE agentsaga LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE", "CREATE DATABASE agentsaga OWNER agentsaga",
		"CREATE ROLE agentsaga_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE", "GRANT CONNECT ON DATABASE agentsaga TO agentsaga_app",
		"/run/secrets/temporal_db_password", "/run/secrets/ledger_owner_password", "/run/secrets/ledger_app_password",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("init-roles.sh lacks %q", want)
		}
	}
	// The ledger's owner migrates and grants; the workers run as the
	// runtime role and wait for the migration.
	lm, ok := p.Services["ledger-migrate"]
	if !ok {
		t.Fatalf("the ledger-migrate job is missing")
	}
	if got := strings.Join(lm.Command, " "); got != "ledger migrate --grant-runtime agentsaga_app" || lm.Image != "agentsaga:local" {
		t.Errorf("ledger-migrate runs %q on %s, want starter ledger migrate --grant-runtime agentsaga_app on the product's image", got, lm.Image)
	}
	if v := lm.Environment[config.EnvLedgerFile]; v == nil || *v != secretsDir+"ledger_owner_dsn" {
		t.Errorf("ledger-migrate must connect with the owner's DSN (secret ledger_owner_dsn)")
	}
	w := p.Services["worker"]
	if d, ok := w.DependsOn["ledger-migrate"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("worker must wait for ledger-migrate to complete")
	}
	for _, s := range w.Secrets {
		if s.Source == "ledger_owner_dsn" || s.Source == "ledger_owner_password" {
			t.Errorf("worker mounts %s: the workers run as agentsaga_app, never the ledger's owner", s.Source)
		}
	}
	for _, svc := range []string{"postgres", "temporal", "temporal-schema"} {
		for _, s := range p.Services[svc].Secrets {
			if svc != "postgres" && s.Source == "postgres_password" {
				t.Errorf("%s mounts the superuser's password", svc)
			}
		}
	}
}

// imageLine matches a compose image line: a variable whose default is the
// reference, and the rest of the line.
var imageLine = regexp.MustCompile(`^\s*image:\s*(\S+)(.*)$`)

// TestImagesPinnedOrMarked: every image pulled (compose and the Dockerfile)
// is a variable whose default is pinned by digest, or is marked to be
// pinned with deploy/pin-images.sh; the built image is the only other.
func TestImagesPinnedOrMarked(t *testing.T) {
	const marker = "# pin with deploy/pin-images.sh"
	digest := regexp.MustCompile(`@sha256:[0-9a-f]{64}\}?$`)
	variable := regexp.MustCompile(`^\$\{[A-Z_]+_IMAGE:-[^}]+\}$`)
	check := func(file string, next func(prev, line string) (ref, rest string, ok bool)) int {
		f, err := os.Open(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, prev := 0, ""
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			ref, rest, ok := next(prev, line)
			prev = line
			if !ok {
				continue
			}
			n++
			if ref == "agentsaga:local" {
				continue
			}
			if file == "docker-compose.yml" && !variable.MatchString(ref) {
				t.Errorf("%s: image %s is not a ${NAME_IMAGE:-default} variable", file, ref)
			}
			if !digest.MatchString(ref) && !strings.Contains(rest, marker) {
				t.Errorf("%s: image %s is neither pinned by digest nor marked %q", file, ref, marker)
			}
		}
		return n
	}
	if n := check("docker-compose.yml", func(_, line string) (string, string, bool) {
		m := imageLine.FindStringSubmatch(line)
		if m == nil {
			return "", "", false
		}
		return m[1], m[2], true
	}); n < 6 {
		t.Errorf("found %d image lines in docker-compose.yml, want every service's", n)
	}
	if n := check("Dockerfile", func(prev, line string) (string, string, bool) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "FROM" {
			return "", "", false
		}
		return f[1], prev, true
	}); n != 2 {
		t.Errorf("found %d FROM lines in the Dockerfile, want 2", n)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "deploy/pin-images.sh")); err != nil {
		t.Errorf("deploy/pin-images.sh is missing: %v", err)
	}
}

// TestComposeUIAndGrafanaNoDefaultAccess: Grafana has no default password
// (a required secret file) and no anonymous visitors; the Temporal UI, which
// has no login here, is on the host's loopback whatever AGENTSAGA_BIND says.
func TestComposeUIAndGrafanaNoDefaultAccess(t *testing.T) {
	p, err := load(t, append(slices.Clone(secrets), "AGENTSAGA_BIND=0.0.0.0"), "metrics")
	if err != nil {
		t.Fatal(err)
	}
	g := p.Services["grafana"].Environment
	if v := g["GF_AUTH_ANONYMOUS_ENABLED"]; v == nil || *v != "false" {
		t.Errorf("grafana must run with GF_AUTH_ANONYMOUS_ENABLED=false")
	}
	if v := g["GF_SECURITY_ADMIN_PASSWORD__FILE"]; v == nil || *v != secretsDir+"grafana_admin_password" {
		t.Errorf("grafana's admin password must come from the grafana_admin_password secret file")
	}
	if _, ok := g["GF_SECURITY_ADMIN_PASSWORD"]; ok {
		t.Errorf("grafana sets GF_SECURITY_ADMIN_PASSWORD: a password in the environment (or a default)")
	}
	for _, pc := range p.Services["temporal-ui"].Ports {
		if pc.HostIP != "127.0.0.1" {
			t.Errorf("temporal-ui publishes on %q with AGENTSAGA_BIND=0.0.0.0: it has no login, keep it on 127.0.0.1", pc.HostIP)
		}
	}
	if v := p.Services["temporal-ui"].Environment["TEMPORAL_DISABLE_WRITE_ACTIONS"]; v == nil || *v != "true" {
		t.Errorf("temporal-ui must run with write actions off")
	}
}

// TestComposeTemporalAsProductionRunsIt: the history shard count is set,
// with its comment; the server exports its metrics and Prometheus scrapes
// them; health checks run tools their images have; workers have limits.
func TestComposeTemporalAsProductionRunsIt(t *testing.T) {
	p := mustLoad(t, "metrics")
	tenv := p.Services["temporal"].Environment
	v := tenv["NUM_HISTORY_SHARDS"]
	if v == nil {
		t.Fatalf("temporal has no NUM_HISTORY_SHARDS: the image's default (4) is fixed for good at first start")
	}
	n, err := strconv.Atoi(*v)
	if err != nil || n < 512 || n&(n-1) != 0 {
		t.Errorf("NUM_HISTORY_SHARDS = %q, want a power of two of at least 512", *v)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, "NUM_HISTORY_SHARDS")
	if i < 0 || !strings.Contains(text[max(0, i-900):i], "can never change") || !strings.Contains(text[max(0, i-900):i], "Chosen") {
		t.Errorf("NUM_HISTORY_SHARDS needs the comment above it saying it can never change and how it was chosen")
	}
	ep := tenv["PROMETHEUS_ENDPOINT"]
	if ep == nil {
		t.Fatalf("temporal does not export its metrics (PROMETHEUS_ENDPOINT)")
	}
	_, port, _ := strings.Cut(*ep, ":")
	if got := readPrometheus(t).dnsTargets("temporal"); !slices.Equal(got, []string{"temporal:" + port}) {
		t.Errorf("prometheus.yml scrapes temporal at %v, want temporal:%s (PROMETHEUS_ENDPOINT)", got, port)
	}

	// Health checks with what each image has.
	tools := map[string]string{"postgres": "pg_isready", "temporal": "nc", "prometheus": "wget", "grafana": "wget"}
	for name, svc := range p.Services {
		hc := svc.HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) == 0 {
			continue
		}
		if svc.Image == "agentsaga:local" {
			t.Errorf("%s has a health check, but the agentsaga image is distroless: no shell, no tool to run it", name)
			continue
		}
		if hc.Test[0] == "CMD-SHELL" && name != "postgres" {
			t.Errorf("%s's health check needs a shell; use CMD with a tool the image has", name)
		}
		want, ok := tools[name]
		if !ok {
			t.Errorf("%s has a health check with %v: add which tool its image has to this test once checked", name, hc.Test)
			continue
		}
		if len(hc.Test) < 2 || hc.Test[1] != want {
			t.Errorf("%s's health check runs %v, want %s (what its image has)", name, hc.Test, want)
		}
	}
	w := p.Services["worker"].Deploy
	if w == nil || w.Resources.Limits == nil || w.Resources.Limits.NanoCPUs <= 0 || w.Resources.Limits.MemoryBytes <= 0 {
		t.Errorf("worker needs CPU and memory limits (deploy.resources.limits)")
	}
	if w == nil || w.Replicas == nil || *w.Replicas < 2 {
		t.Errorf("worker replicas = %v, want at least 2 by default (Prometheus scrapes each)", w)
	}
}

// alertMetricRef matches metric names in an alert expression.
var alertMetricRef = regexp.MustCompile(`\b(?:agentsaga_[a-z0-9_]+|up)\b`)

// TestAlertRules: the rules file is loaded by Prometheus and mounted; each
// of the seeds' figures has its alert; every metric a rule names is one the
// product exports (or Prometheus' up); kinds are the ledger's; the UNKNOWN
// threshold is past every demo tool's reconcile window.
func TestAlertRules(t *testing.T) {
	prom := readPrometheus(t)
	if !slices.Contains(prom.RuleFiles, "/etc/prometheus/alerts.yml") {
		t.Errorf("prometheus.yml rule_files = %v, want /etc/prometheus/alerts.yml", prom.RuleFiles)
	}
	p := mustLoad(t, "metrics")
	if !slices.ContainsFunc(p.Services["prometheus"].Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Target == "/etc/prometheus/alerts.yml" && strings.HasSuffix(v.Source, "deploy/prometheus/alerts.yml")
	}) {
		t.Errorf("prometheus does not mount deploy/prometheus/alerts.yml at /etc/prometheus/alerts.yml")
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "deploy/prometheus/alerts.yml", &rules)
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	for _, want := range []string{"AgentSagaExceptionQueueOld", "AgentSagaUnknownPastWindow", "AgentSagaCompensationFailed", "AgentSagaQuestionOld"} {
		if exprs[want] == "" {
			t.Errorf("alerts.yml has no %s", want)
		}
	}
	kindRef := regexp.MustCompile(`kind="([a-z_]+)"`)
	for name, e := range exprs {
		for _, m := range alertMetricRef.FindAllString(e, -1) {
			if m != "up" && !slices.Contains(productMetrics, m) {
				t.Errorf("alert %s uses %s, which neither package telemetry nor workflows exports", name, m)
			}
		}
		for _, k := range kindRef.FindAllStringSubmatch(e, -1) {
			if !slices.Contains(ledger.ExceptionKinds, k[1]) {
				t.Errorf("alert %s filters kind=%q, not one of the ledger's %v", name, k[1], ledger.ExceptionKinds)
			}
		}
	}
	th := regexp.MustCompile(`>\s*([0-9]+)\s*$`).FindStringSubmatch(exprs["AgentSagaUnknownPastWindow"])
	if th == nil {
		t.Fatalf("AgentSagaUnknownPastWindow has no threshold in seconds: %q", exprs["AgentSagaUnknownPastWindow"])
	}
	secs, _ := strconv.Atoi(th[1])
	tools, err := demotools.Registry(demotools.SandboxConfig("http://sandbox:8090"))
	if err != nil {
		t.Fatal(err)
	}
	var longest time.Duration
	for _, s := range tools.Specs() {
		longest = max(longest, s.Window())
	}
	if got := time.Duration(secs) * time.Second; got <= longest {
		t.Errorf("AgentSagaUnknownPastWindow fires after %v, within the longest reconcile window %v: it would page on outcomes still being reconciled", got, longest)
	}
}

// TestPinImagesScript runs deploy/pin-images.sh on a copy of the files with
// a stand-in `docker` that answers every `buildx imagetools inspect` with
// one digest: afterwards every pulled image carries it, the built image is
// untouched, the file still loads, and --check passes (it fails before).
func TestPinImagesScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("bash is not installed: %v", err)
	}
	dir := t.TempDir()
	for _, f := range []string{"docker-compose.yml", "Dockerfile", "deploy/pin-images.sh"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	bin := t.TempDir()
	fake := "#!/bin/sh\necho '{\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"digest\":\"" + digest + "\",\"size\":1}'\n"
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bash, append([]string{filepath.Join(dir, "deploy/pin-images.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("--check"); err == nil {
		t.Errorf("--check passed on tag-only images: %s", out)
	}
	if out, err := run(); err != nil {
		t.Fatalf("pin-images.sh: %v\n%s", err, out)
	}
	compose, _ := os.ReadFile(filepath.Join(dir, "docker-compose.yml"))
	for _, line := range strings.Split(string(compose), "\n") {
		m := imageLine.FindStringSubmatch(line)
		if m == nil || m[1] == "agentsaga:local" {
			continue
		}
		if !strings.HasSuffix(m[1], "@"+digest+"}") {
			t.Errorf("after pinning: %q", strings.TrimSpace(line))
		}
	}
	docker, _ := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	for _, line := range strings.Split(string(docker), "\n") {
		if strings.HasPrefix(line, "FROM ") && !strings.Contains(line, "@"+digest) {
			t.Errorf("after pinning: %q", line)
		}
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "docker-compose.yml")}, cli.WithWorkingDirectory(dir), cli.WithEnv(secrets))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("the pinned file does not load: %v", err)
	}
	if img := p.Services["temporal"].Image; img != "temporalio/server:1.32.1@"+digest {
		t.Errorf("temporal image after pinning = %q", img)
	}
	if out, err := run("--check"); err != nil {
		t.Errorf("--check after pinning: %v\n%s", err, out)
	}
}

// TestComposeStepsInOrder: the header of docker-compose.yml and the
// README's compose steps set AGENTSAGA_OPERATORS_FILE before the first
// compose command (every one interpolates it), make every secret file the
// file names, give each an owner, and run the certs job before `up`.
func TestComposeStepsInOrder(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		header = append(header, strings.TrimPrefix(l, "#"))
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "docs", "production.md"))
	if err != nil {
		t.Fatal(err)
	}
	rs := string(readme)
	i := strings.Index(rs, "With `docker compose`")
	if i < 0 {
		t.Fatalf("docs/production.md has no compose steps (\"With `docker compose`\")")
	}
	block := rs[i:]
	if j := strings.Index(block, "```sh"); j >= 0 {
		block = block[j:]
		if k := strings.Index(block[5:], "```"); k >= 0 {
			block = block[:k+5]
		}
	}
	p := allProfiles(t)
	for name, steps := range map[string]string{"docker-compose.yml header": strings.Join(header, "\n"), "README": block} {
		first := func(s string) int {
			for n, l := range strings.Split(steps, "\n") {
				if strings.Contains(l, s) && !strings.HasPrefix(strings.TrimSpace(l), "# ") {
					return n
				}
			}
			return -1
		}
		op, compose, certs, up := first("export AGENTSAGA_OPERATORS_FILE="), first("docker compose"), first("docker compose run --rm certs"), first("docker compose up -d")
		if op < 0 || compose < 0 || op > compose {
			t.Errorf("%s: export AGENTSAGA_OPERATORS_FILE (line %d) must come before the first docker compose command (line %d)", name, op, compose)
		}
		if certs < 0 || up < 0 || certs > up {
			t.Errorf("%s: docker compose run --rm certs (line %d) must come before docker compose up -d (line %d)", name, certs, up)
		}
		for _, s := range p.Secrets {
			base := filepath.Base(s.File)
			if strings.Contains(s.File, string(filepath.Separator)+"tls"+string(filepath.Separator)) {
				continue // made by the certs job
			}
			made, owned := false, false
			for _, l := range strings.Split(steps, "\n") {
				if strings.Contains(l, "chown") && strings.Contains(l, "secrets/"+base) {
					owned = true
				}
				if !strings.Contains(l, "chown") && !strings.Contains(l, "chmod") && strings.Contains(l, base) {
					made = true
				}
			}
			if !made {
				t.Errorf("%s: no step makes secrets/%s", name, base)
			}
			if !owned {
				t.Errorf("%s: no chown gives secrets/%s to the user its container reads it as", name, base)
			}
		}
	}
}
