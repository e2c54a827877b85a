package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// The components a CPU sample is charged to. The whole stack of a sample is
// read, and the first component in this order that any of its frames
// belongs to takes it: the codec's encryption is charged to the codec
// whether the worker or the client called it, the ledger's SQL to the
// ledger, and only then the goroutine's owner (the bench's client, the
// sandbox providers, the Temporal server, the worker).
const (
	// CompCodec is the SDK's data converter and package codec under it:
	// values to JSON payloads and back, and their encryption.
	CompCodec = "codec"
	// CompLedger is the ledger packages and the SQL drivers under them.
	CompLedger = "ledger"
	// CompClient is the bench's own client goroutines: starting plans and
	// waiting for their results (sagaclient and the SDK's client calls).
	CompClient = "client"
	// CompProviders is the sandbox providers answering the tools' HTTP
	// calls (the same calls on both sides).
	CompProviders = "providers"
	// CompServer is the embedded Temporal server.
	CompServer = "server"
	// CompWorker is the SDK's worker and what it runs: the workflows, the
	// activities, the tools' HTTP client.
	CompWorker = "worker"
	// CompNet is gRPC, HTTP/2 and the network below any of the above
	// (connection reader and writer goroutines belong to nobody).
	CompNet = "grpc/net"
	// CompRuntime is the Go runtime's own work: garbage collection, the
	// scheduler, the profiler.
	CompRuntime = "runtime"
)

// Components lists the components in the order a sample is charged.
var Components = []string{CompCodec, CompLedger, CompClient, CompProviders, CompServer, CompWorker, CompNet, CompRuntime}

// componentPrefixes are the function-name prefixes of each component, in
// Components order (CompRuntime takes the rest).
var componentPrefixes = [][]string{
	{"github.com/agentsaga/agentsaga/codec.", "go.temporal.io/sdk/converter."},
	// SQLite under the ledger's frames only: the embedded server and the
	// sandbox providers use SQLite too.
	{"github.com/agentsaga/agentsaga/ledger", "github.com/jackc/pgx"},
	{"github.com/agentsaga/agentsaga/internal/bench.(*runner).onePlan", "github.com/agentsaga/agentsaga/internal/bench.(*runner).onePlain",
		"github.com/agentsaga/agentsaga/sagaclient."},
	{"github.com/agentsaga/agentsaga/internal/sandbox"},
	{"go.temporal.io/server/"},
	{"go.temporal.io/sdk/", "github.com/agentsaga/agentsaga/workflows.", "github.com/agentsaga/agentsaga/activities.",
		"github.com/agentsaga/agentsaga/tool.", "github.com/agentsaga/agentsaga/httptool.", "github.com/agentsaga/agentsaga/internal/bench."},
	{"google.golang.org/grpc", "golang.org/x/net/", "net.", "net/http.", "crypto/tls.", "internal/poll.", "syscall."},
}

// component is the component a sample's stack is charged to.
func component(s *profile.Sample) string {
	best := len(Components) - 1
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			name := line.Function.Name
			for i := 0; i < best; i++ {
				if hasAnyPrefix(name, componentPrefixes[i]) {
					best = i
					break
				}
			}
			if best == 0 {
				return Components[0]
			}
		}
	}
	return Components[best]
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// split charges each sample's CPU time of p to its component.
func split(p *profile.Profile) (map[string]time.Duration, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("bench: the profile has no cpu/nanoseconds samples (types %v)", p.SampleType)
	}
	out := map[string]time.Duration{}
	for _, s := range p.Sample {
		out[component(s)] += time.Duration(s.Value[idx])
	}
	return out, nil
}

// profiler records one CPU profile per batch, when on.
type profiler struct {
	buf bytes.Buffer
	on  bool
}

// start begins a batch's profile. It is off (and says why once) when a
// profile is already running, as under `go test -cpuprofile`.
func (pr *profiler) start() error {
	pr.buf.Reset()
	if err := pprof.StartCPUProfile(&pr.buf); err != nil {
		return fmt.Errorf("bench: the CPU split is off: %w (another CPU profile runs, such as go test -cpuprofile)", err)
	}
	pr.on = true
	return nil
}

// stop ends the batch's profile and parses it; nil when it was off.
func (pr *profiler) stop() (*profile.Profile, error) {
	if !pr.on {
		return nil, nil
	}
	pprof.StopCPUProfile()
	pr.on = false
	p, err := profile.Parse(&pr.buf)
	if err != nil {
		return nil, fmt.Errorf("bench: parse the batch's CPU profile: %w", err)
	}
	return p, nil
}

// mergeProfiles merges the profiles of one side's batches; nil when none.
func mergeProfiles(a, b *profile.Profile) (*profile.Profile, error) {
	switch {
	case a == nil:
		return b, nil
	case b == nil:
		return a, nil
	}
	m, err := profile.Merge([]*profile.Profile{a, b})
	if err != nil {
		return nil, fmt.Errorf("bench: merge CPU profiles: %w", err)
	}
	return m, nil
}

// perPlan turns a split into milliseconds per plan, every component named.
func perPlan(by map[string]time.Duration, plans int) map[string]float64 {
	if by == nil || plans == 0 {
		return nil
	}
	out := make(map[string]float64, len(Components))
	for _, c := range Components {
		out[c] = round(float64(by[c])/float64(time.Millisecond)/float64(plans), 2)
	}
	return out
}

// profileName is the file a side's merged profile at one level is written
// to: agentsaga-3steps-c10.pprof.
func profileName(agentsaga bool, steps, conc int) string {
	side := "plain"
	if agentsaga {
		side = "agentsaga"
	}
	return fmt.Sprintf("%s-%dsteps-c%d.pprof", side, steps, conc)
}

// noCommitsProfileName is the file of Options.CommitSplit's third side:
// no-commits-3steps-c10.pprof.
func noCommitsProfileName(steps, conc int) string {
	return fmt.Sprintf("no-commits-%dsteps-c%d.pprof", steps, conc)
}

// writeProfile writes p to dir/name, for `go tool pprof`.
func writeProfile(dir, name string, p *profile.Profile) error {
	if dir == "" || p == nil {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("bench: write the CPU profile: %w", err)
	}
	if err := p.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: write the CPU profile %s: %w", f.Name(), err)
	}
	return f.Close()
}
