package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/probe"
)

// maxProbeArgs is the largest --args value, in bytes.
const maxProbeArgs = 64 << 10

// probeFlags are the flags of `tools probe`.
type probeFlags struct {
	files     []string
	only      []string
	args      map[string]json.RawMessage
	lagMax    time.Duration
	settleMax time.Duration
	poll      time.Duration
	json      bool
}

func (p *probeFlags) register(fs *flag.FlagSet) {
	p.args = map[string]json.RawMessage{}
	fs.Func("tools", "a tool catalogue file (YAML, see catalog/) whose write tools are probed; repeatable (env "+catalog.EnvTools+")", func(v string) error {
		p.files = append(p.files, v)
		return nil
	})
	fs.Func("tool", "probe only this write tool; repeatable (default: every write tool given --args)", func(v string) error {
		p.only = append(p.only, v)
		return nil
	})
	fs.Func("args", "NAME=JSON: the args of a call of tool NAME the staging provider accepts; every {probe} in JSON becomes a token unique to each probe call (a provider that merges equal calls needs one); repeatable, at most 64 KiB each", func(v string) error {
		name, raw, err := parseProbeArgs(v)
		if err != nil {
			return err
		}
		if _, dup := p.args[name]; dup {
			return fmt.Errorf("the args of %s are given twice", name)
		}
		p.args[name] = raw
		return nil
	})
	fs.DurationVar(&p.lagMax, "lag-max", probe.DefaultLagMax, "how long the lookup is asked for a fresh effect before the probe says it never finds one (at most 30m)")
	fs.DurationVar(&p.settleMax, "settle-max", 0, "how long an abandoned request is watched for its effect (default twice the tool's horizon, at least 5s; at most 30m)")
	fs.DurationVar(&p.poll, "poll", probe.DefaultPoll, "the wait between two lookups (1ms to 1m)")
	fs.BoolVar(&p.json, "json", false, "print JSON")
}

// parseProbeArgs reads one --args value, NAME=JSON: a JSON object of at
// most maxProbeArgs bytes whose {probe} tokens stand inside strings.
func parseProbeArgs(v string) (string, json.RawMessage, error) {
	name, raw, ok := strings.Cut(v, "=")
	switch {
	case !ok || name == "":
		return "", nil, fmt.Errorf("give NAME=JSON, such as send_email='{\"to\":\"qa@example.com\",\"subject\":\"probe {probe}\",\"body\":\"hi\"}'")
	case len(raw) > maxProbeArgs:
		return "", nil, fmt.Errorf("the args of %s are %d bytes, the limit is %d", clipName(name), len(raw), maxProbeArgs)
	}
	// "p" is no JSON value: valid with it, every {probe} is inside a
	// string, where any token keeps the JSON valid.
	check := []byte(strings.ReplaceAll(raw, "{probe}", "p"))
	if _, err := tool.DecodeObject(check); err != nil || !json.Valid(check) || strings.TrimSpace(raw) == "" {
		return "", nil, fmt.Errorf("the args of %s are not one JSON object, with {probe} only inside strings", clipName(name))
	}
	return name, json.RawMessage(raw), nil
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// probeResult is the JSON of `tools probe`.
type probeResult struct {
	Reports []probe.Report `json:"reports"`
	// Skipped names the write tools not probed, and why.
	Skipped map[string]string `json:"skipped,omitempty"`
}

// cmdTools is the `tools` group.
func cmdTools(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	sub, err := subcommands("tools", args, out, "probe")
	if err != nil {
		return err
	}
	switch sub {
	case "probe":
		return cmdToolsProbe(ctx, args[1:], out)
	}
	return nil
}

// cmdToolsProbe probes the write tools of the catalogue against their
// (staging) providers with real requests.
func cmdToolsProbe(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tools probe", flag.ContinueOnError)
	var pf probeFlags
	pf.register(fs)
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("tools probe: takes no arguments, got %q (see %s tools probe --help)", pos[0], progName)
	}
	switch {
	case pf.lagMax <= 0 || pf.lagMax > probe.MaxWait:
		return usageErr("tools probe: --lag-max %s: give a positive duration up to %s", pf.lagMax, probe.MaxWait)
	case pf.settleMax < 0 || pf.settleMax > probe.MaxWait:
		return usageErr("tools probe: --settle-max %s: give a positive duration up to %s (or 0 for twice the horizon)", pf.settleMax, probe.MaxWait)
	case pf.poll < time.Millisecond || pf.poll > time.Minute:
		return usageErr("tools probe: --poll %s: give 1ms to 1m", pf.poll)
	}
	files := pf.files
	if len(files) == 0 {
		files = filepath.SplitList(os.Getenv(catalog.EnvTools))
	}
	gotools := configFrom(ctx).Tools
	if len(files) == 0 && len(gotools) == 0 {
		return usageErr("tools probe: no tools: give --tools FILE, the catalogue whose write tools to probe (env %s)", catalog.EnvTools)
	}
	var cat *catalog.Catalog
	var all []tool.Tool
	if len(files) > 0 {
		if cat, err = catalog.Load(files...); err != nil {
			return usageErr("tools probe: --tools: %v", err)
		}
		defer func() { _ = cat.Close() }()
		all = cat.Tools()
	}
	all = append(all, gotools...)
	if _, err := tool.NewRegistry(all...); err != nil {
		return usageErr("tools probe: %v", err)
	}
	byName := map[string]tool.Tool{}
	for _, tl := range all {
		byName[tl.Spec().Name] = tl
	}
	for _, n := range pf.only {
		tl, ok := byName[n]
		switch {
		case !ok:
			return usageErr("tools probe: --tool %s: no such tool in the catalogue", n)
		case !tl.Spec().Class.IsWrite():
			return usageErr("tools probe: --tool %s: a %s tool makes no effect: probe writes only", n, tl.Spec().Class)
		}
	}
	for n := range pf.args {
		if _, ok := byName[n]; !ok {
			return usageErr("tools probe: --args %s: no such tool in the catalogue", n)
		}
	}
	res := probeResult{Reports: []probe.Report{}, Skipped: map[string]string{}}
	var contradicted []string
	for _, tl := range all {
		s := tl.Spec()
		if !s.Class.IsWrite() || (len(pf.only) > 0 && !slices.Contains(pf.only, s.Name)) {
			continue
		}
		tmpl, ok := pf.args[s.Name]
		switch {
		case s.Reversal:
			res.Skipped[s.Name] = "a reversal: it acts on an effect of its original, so it is not probed on its own"
			continue
		case !ok:
			res.Skipped[s.Name] = fmt.Sprintf("no args: give --args %s='{...}' with args the staging provider accepts", s.Name)
			continue
		}
		session := probe.NewSession()
		rep, err := probe.Run(ctx, tl, probe.Options{Args: probe.ArgsTemplate(tmpl, session), Session: session,
			Claims: probe.ClaimsOf(s), LagMax: pf.lagMax, SettleMax: pf.settleMax, Poll: pf.poll})
		if err != nil {
			return fmt.Errorf("tools probe: %w", err)
		}
		res.Reports = append(res.Reports, rep)
		if rep.Contradicted() {
			contradicted = append(contradicted, s.Name)
		}
		if !pf.json {
			if err := rep.WriteText(out); err != nil {
				return err
			}
			fmt.Fprintln(out)
		}
	}
	if pf.json {
		if err := printJSON(out, res); err != nil {
			return err
		}
	} else {
		for _, n := range sortedKeys(res.Skipped) {
			fmt.Fprintf(out, "%s: not probed: %s\n", n, safe(res.Skipped[n]))
		}
	}
	if len(res.Reports) == 0 {
		return usageErr("tools probe: no write tool was probed: give --args NAME=JSON for each tool to probe")
	}
	if len(contradicted) > 0 {
		return Exit(1, fmt.Errorf("tools probe: the provider contradicts the catalogue for %s: change the settings as the verdicts say", strings.Join(contradicted, ", ")))
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
