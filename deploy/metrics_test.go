package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/agentsaga/agentsaga/telemetry"
	"github.com/agentsaga/agentsaga/workflows"
)

// productMetrics are the metrics agentsaga defines, by their names in the
// code: the dashboard may query these and no others.
var productMetrics = []string{
	telemetry.MetricToolCalls, telemetry.MetricToolCallSeconds, telemetry.MetricReconciles,
	telemetry.MetricExceptions, telemetry.MetricExceptionOldest, telemetry.MetricLedgerUp,
	workflows.MetricPlansCompleted, workflows.MetricQuestionsOpened, workflows.MetricDecisions,
	workflows.MetricCompensations, workflows.MetricUnknownSettle,
}

// histograms are the product metrics exposed as histograms (_bucket, _sum,
// _count series).
var histograms = []string{telemetry.MetricToolCallSeconds, workflows.MetricUnknownSettle}

const dashboardPath = "deploy/grafana/dashboards/agentsaga.json"

// TestComposeMetricsProfile: Prometheus and Grafana run only with the
// metrics profile, publish their ports on 127.0.0.1 only, and mount files
// that exist; the worker serves /metrics on the port Prometheus scrapes.
func TestComposeMetricsProfile(t *testing.T) {
	base := mustLoad(t)
	for _, name := range []string{"prometheus", "grafana"} {
		if _, ok := base.Services[name]; ok {
			t.Errorf("service %s runs without the metrics profile; give it profiles: [metrics]", name)
		}
		d, ok := base.DisabledServices[name]
		if !ok {
			t.Errorf("service %s is missing", name)
			continue
		}
		if !slices.Equal(d.Profiles, []string{"metrics"}) {
			t.Errorf("%s profiles = %v, want [metrics]", name, d.Profiles)
		}
	}

	p := mustLoad(t, "metrics")
	for _, c := range []struct {
		service string
		port    uint32
	}{{"prometheus", 9090}, {"grafana", 3000}} {
		svc, ok := p.Services[c.service]
		if !ok {
			t.Fatalf("service %s is not enabled by --profile metrics", c.service)
		}
		if len(svc.Ports) != 1 || svc.Ports[0].HostIP != "127.0.0.1" || svc.Ports[0].Target != c.port || svc.Ports[0].Published != strconv.FormatUint(uint64(c.port), 10) {
			t.Errorf("service %s ports = %+v, want only 127.0.0.1:%d:%d", c.service, svc.Ports, c.port, c.port)
		}
		for _, v := range svc.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s mounts %s, which does not exist: %v", c.service, v.Source, err)
			}
			if !v.ReadOnly {
				t.Errorf("service %s mounts %s writable; mount configuration read-only", c.service, v.Source)
			}
		}
	}
	for name, svc := range p.Services {
		for _, port := range svc.Ports {
			if (name == "prometheus" || name == "grafana") && port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %v beyond 127.0.0.1", name, port)
			}
		}
	}

	worker := p.Services["worker"]
	cmd := strings.Join(worker.Command, " ")
	if !strings.Contains(cmd, "--metrics-addr 0.0.0.0:9464") {
		t.Errorf("worker command %q does not serve metrics on :9464 (--metrics-addr 0.0.0.0:9464)", cmd)
	}
	if len(worker.Ports) != 0 {
		t.Errorf("worker publishes %v on the host; its metrics stay on the compose network", worker.Ports)
	}

	// Every worker replica is scraped: found by the service name, never
	// one static target.
	prom := readPrometheus(t)
	if got := prom.dnsTargets("agentsaga-worker"); !slices.Equal(got, []string{"worker:9464"}) {
		t.Errorf("prometheus.yml job agentsaga-worker finds %v by DNS, want worker:9464 (every replica of the worker service)", got)
	}
	for _, sc := range prom.ScrapeConfigs {
		if len(sc.StaticConfigs) > 0 {
			t.Errorf("prometheus.yml job %s has static targets; find the compose services by DNS (dns_sd_configs) so every replica is scraped", sc.JobName)
		}
	}

	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "deploy/grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("Grafana's datasource = %+v, want uid prometheus at http://prometheus:9090", ds.Datasources)
	}
	var dp struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "deploy/grafana/provisioning/dashboards/agentsaga.yml", &dp)
	mounted := false
	for _, v := range p.Services["grafana"].Volumes {
		for _, pr := range dp.Providers {
			if v.Target == pr.Options.Path && filepath.Clean(v.Source) == filepath.Clean(filepath.Join(abs(t), filepath.Dir(dashboardPath))) {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("Grafana's dashboard provider does not read the mounted %s", filepath.Dir(dashboardPath))
	}
}

// metricRef matches metric names in PromQL: agentsaga_* and temporal_*.
var metricRef = regexp.MustCompile(`\b(?:agentsaga|temporal)_[a-z0-9_]+\b`)

// TestDashboardQueriesOnlyMetricsThatExist: every metric the dashboard
// queries is defined in package telemetry or workflows (histogram series by
// their base name), every panel uses the provisioned datasource, and every
// product metric is on the dashboard.
func TestDashboardQueriesOnlyMetricsThatExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardPath, err)
	}
	if dash["uid"] != "agentsaga" {
		t.Errorf("dashboard uid = %v, want agentsaga", dash["uid"])
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if e, ok := x["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			if d, ok := x["datasource"].(map[string]any); ok && d["uid"] != "prometheus" {
				t.Errorf("a panel or query uses datasource %v, want uid prometheus (provisioned)", d)
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(dash)
	if len(exprs) == 0 {
		t.Fatalf("the dashboard has no queries")
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e, -1) {
			base := name
			for _, h := range histograms {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if name == h+suffix {
						base = h
					}
				}
			}
			if !slices.Contains(productMetrics, base) {
				t.Errorf("the dashboard queries %s (in %q), which neither package telemetry nor workflows defines", name, e)
			}
			if slices.Contains(histograms, name) {
				t.Errorf("the dashboard queries histogram %s without _bucket, _sum or _count (in %q)", name, e)
			}
			used[base] = true
		}
	}
	for _, m := range productMetrics {
		if !used[m] {
			t.Errorf("product metric %s is on no panel of the dashboard", m)
		}
	}
}

// prometheusConfig is the part of prometheus.yml the tests read.
type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

func readPrometheus(t *testing.T) prometheusConfig {
	t.Helper()
	var p prometheusConfig
	readYAML(t, "deploy/prometheus/prometheus.yml", &p)
	return p
}

// dnsTargets lists a job's DNS-discovered name:port pairs.
func (p prometheusConfig) dnsTargets(job string) []string {
	var out []string
	for _, sc := range p.ScrapeConfigs {
		if sc.JobName != job {
			continue
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				out = append(out, n+":"+strconv.Itoa(d.Port))
			}
		}
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func abs(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return root
}
