package catalog

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// fieldRE is a field of an upstream MCP answer, which may be camelCase.
var fieldRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validName(s string) bool { return len(s) <= MaxNameLen && nameRE.MatchString(s) }

var headerRE = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

// Options change how a catalogue is loaded; the zero value reads the real
// environment and files.
type Options struct {
	// Getenv reads an environment variable; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// ReadFile reads a secret or CA file; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// Transport is the base transport of every system (tests); nil means
	// a clone of http.DefaultTransport, with the system's CA when it names
	// one.
	Transport http.RoundTripper
	// MCPWrap, when set, wraps every connection to an upstream MCP server
	// (tests inject lost answers with it, see mcptool/mcptest); nil in
	// production.
	MCPWrap func(server string, c mcp.Connection) mcp.Connection
}

func (o Options) getenv(k string) (string, bool) {
	if o.Getenv != nil {
		return o.Getenv(k)
	}
	return os.LookupEnv(k)
}

func (o Options) readFile(p string) ([]byte, error) {
	if o.ReadFile != nil {
		return o.ReadFile(p)
	}
	return os.ReadFile(p)
}

// secretHeader reports header names whose values are credentials.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "key", "token", "secret", "password", "cookie", "signature"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

var envRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func (b *builder) system(i int, d systemDecl) {
	path := fmt.Sprintf("systems[%d]", i)
	p := b.p
	if !validName(d.Name) {
		p.add(path+".name", "%q is not a name: use lower case letters, digits and '_', starting with a letter, at most %d bytes", clip(d.Name, 40), MaxNameLen)
		return
	}
	if _, dup := b.systems[d.Name]; dup {
		p.add(path+".name", "system %q is declared twice", d.Name)
		return
	}
	s := &system{name: d.Name, headers: http.Header{}}
	b.systems[d.Name] = s
	base := d.BaseURL
	if len(base) > MaxTemplateLen {
		p.add(path+".base_url", "is %d bytes, the limit is %d", len(base), MaxTemplateLen)
		return
	}
	var missing []string
	base = envRE.ReplaceAllStringFunc(base, func(m string) string {
		name := envRE.FindStringSubmatch(m)[1]
		v, ok := b.opts.getenv(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	for _, m := range missing {
		p.add(path+".base_url", "environment variable %s is not set: set it or write the URL out", m)
	}
	if len(missing) == 0 {
		u, err := url.Parse(base)
		switch {
		case base == "":
			p.add(path+".base_url", "is missing: write the provider's root URL, such as https://api.example.com")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			p.add(path+".base_url", "%q is not an http(s) URL with a host", clip(redact.String(base), 80))
		case u.User != nil:
			p.add(path+".base_url", "holds credentials: move them to a header with from_env or from_file")
		case u.RawQuery != "" || u.Fragment != "":
			p.add(path+".base_url", "must not hold a query or fragment: put them in each tool's request")
		}
		s.baseURL = strings.TrimRight(base, "/")
	}
	var pool *x509.CertPool
	if d.CAFile != "" {
		pem, err := b.opts.readFile(b.local(d.CAFile))
		if err != nil {
			p.add(path+".ca_file", "cannot be read: %v", err)
		} else {
			pool = x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				p.add(path+".ca_file", "holds no PEM certificate")
			}
		}
	}
	if len(d.Headers) > MaxHeaders {
		p.add(path+".headers", "declares %d headers, the limit is %d", len(d.Headers), MaxHeaders)
	}
	for j, h := range d.Headers {
		hp := fmt.Sprintf("%s.headers[%d]", path, j)
		if !headerRE.MatchString(h.Name) || len(h.Name) > MaxNameLen {
			p.add(hp+".name", "%q is not a header name", clip(h.Name, 40))
			continue
		}
		n := 0
		for _, set := range []bool{h.Value != "", h.FromEnv != "", h.FromFile != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			p.add(hp, "set exactly one of value, from_env and from_file")
			continue
		}
		var v string
		switch {
		case h.Value != "":
			if secretHeader(h.Name) {
				p.add(hp+".value", "header %s carries a credential: never write it inline, use from_env or from_file", h.Name)
				continue
			}
			if _, found := redact.Find(h.Value); found {
				p.add(hp+".value", "looks like a secret: never write it inline, use from_env or from_file")
				continue
			}
			v = h.Value
		case h.FromEnv != "":
			ev, ok := b.opts.getenv(h.FromEnv)
			if !ok || ev == "" {
				p.add(hp+".from_env", "environment variable %s is not set or empty: set it before starting the worker", h.FromEnv)
				continue
			}
			v = ev
		default:
			raw, err := b.opts.readFile(b.local(h.FromFile))
			if err != nil {
				p.add(hp+".from_file", "cannot be read: %v", err)
				continue
			}
			v = strings.TrimRight(string(raw), "\r\n")
			if v == "" {
				p.add(hp+".from_file", "%s is empty", h.FromFile)
				continue
			}
		}
		v = h.Prefix + v
		if strings.ContainsAny(v, "\r\n\x00") {
			p.add(hp, "the value holds a line break or NUL: a header value is one line")
			continue
		}
		s.headers.Add(h.Name, v)
	}
	s.client = b.httpClient(pool)
	s.client.Transport = &transport{base: s.client.Transport, origin: s.baseURL, headers: s.headers}
}

func (b *builder) httpClient(pool *x509.CertPool) *http.Client {
	if b.opts.Transport != nil {
		return &http.Client{Transport: b.opts.Transport}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if pool != nil {
		t.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{Transport: t}
}

func duration(p *problems, path, s string, required bool) time.Duration {
	if s == "" {
		if required {
			p.add(path, "is missing: write a duration such as 10s")
		}
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.add(path, "%q is not a positive duration: write one such as 500ms, 10s or 2m", clip(s, 40))
		return 0
	}
	return d
}

var fieldTypes = map[string]tool.FieldType{
	"string": tool.String, "integer": tool.Integer, "money": tool.Money, "boolean": tool.Boolean,
	"email": tool.Email, "currency": tool.Currency, "enum": tool.String,
}

var outcomes = map[string]tool.Kind{
	"rejected": tool.KindRejected, "conflict": tool.KindConflict, "throttled": tool.KindThrottled,
	"unavailable": tool.KindUnavailable, "in_flight": tool.KindInFlight,
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// MaxSettle bounds a tool's settle time and its lookup's lag, each.
const MaxSettle = time.Hour

// MCPSettle is the settle time (tool.Spec.Settle) of an mcp tool that
// declares none: MCP cancellation is advisory, so a server may finish a call
// long after the client gave up. For a NON_IDEMPOTENT_WRITE four times its
// timeout and at least a minute; for the other classes zero (the upstream
// deduplicates by key or condition; see tool.DefaultSettle).
func MCPSettle(c tool.Class, timeout time.Duration) time.Duration {
	if c != tool.NonIdempotentWrite {
		return 0
	}
	return max(4*timeout, time.Minute)
}

// horizon refuses a write whose in-flight horizon (settle + lag) is not
// shorter than its reconcile window: an absent answer could never settle.
func (b *builder) horizon(path string, s tool.Spec) {
	if !s.Class.IsWrite() || s.NoLookup || s.Horizon() < s.Window() {
		return
	}
	at := path + ".reconcile_window"
	if s.ReconcileWindow == 0 {
		at = path
	}
	b.p.add(at, "the reconcile window %s is not longer than the in-flight horizon, settle %s + lookup lag %s: an absent lookup answer could never settle; lengthen reconcile_window or shorten settle or lag", s.Window(), s.SettleTime(), s.Lag)
}

// spec builds the tool's spec from d, adding problems under path.
func (b *builder) spec(path string, d toolDecl) tool.Spec {
	p := b.p
	s := tool.Spec{Name: d.Name, Description: d.Description, System: d.System, Class: tool.Class(d.Class), Compensator: d.Compensator,
		Reversal: d.Reverses != "", NoLookup: d.NoLookup, MaxAmountMinor: d.MaxAmountMinor}
	if d.Description == "" {
		p.add(path+".description", "is missing: write one line for people and planners")
	} else if msg := tool.CheckText(d.Description, tool.DefaultMaxStringLen, false); msg != "" {
		p.add(path+".description", "%s", msg)
	}
	if !s.Class.Valid() {
		p.add(path+".class", "%q is not a class: use READ, IDEMPOTENT_WRITE, CONDITIONAL_WRITE or NON_IDEMPOTENT_WRITE", clip(d.Class, 40))
	}
	s.Timeout = duration(p, path+".timeout", d.Timeout, true)
	s.ReconcileWindow = duration(p, path+".reconcile_window", d.ReconcileWindow, false)
	s.Settle = duration(p, path+".settle", d.Settle, false)
	if s.Settle > MaxSettle {
		p.add(path+".settle", "%s is longer than the limit %s: a request that can land this late needs a person, not a wait (declare no_lookup)", s.Settle, MaxSettle)
	}
	if s.Settle == 0 && d.MCP != nil {
		s.Settle = MCPSettle(s.Class, s.Timeout)
	}
	if r := d.Retry; r != nil {
		rp := tool.RetryPolicy{MaxAttempts: r.MaxAttempts, BackoffCoefficient: r.BackoffCoefficient,
			InitialInterval: duration(p, path+".retry.initial_interval", r.InitialInterval, true),
			MaximumInterval: duration(p, path+".retry.maximum_interval", r.MaximumInterval, false)}
		if rp.BackoffCoefficient == 0 {
			rp.BackoffCoefficient = 2
		}
		if err := rp.Validate(); err != nil && rp.InitialInterval > 0 {
			p.add(path+".retry", "%v", err)
		}
		s.Retry = &rp
	}
	if s.MaxAmountMinor < 0 {
		p.add(path+".max_amount_minor", "is negative: set a positive ceiling in minor units or leave it out")
	}
	if len(d.Args) > MaxArgs {
		p.add(path+".args", "declares %d arguments, the limit is %d", len(d.Args), MaxArgs)
	}
	if s.Reversal && len(d.Args) > 0 {
		p.add(path+".args", "a reversal's arguments are fixed (original_key, original_tool, original_external_id): remove them and use {original.args.NAME}")
	}
	seen := map[string]bool{}
	for i, a := range d.Args {
		ap := fmt.Sprintf("%s.args[%d]", path, i)
		if !validName(a.Name) {
			p.add(ap+".name", "%q is not a name: use lower case letters, digits and '_'", clip(a.Name, 40))
			continue
		}
		if a.Name == "key" || a.Name == "original" {
			p.add(ap+".name", "%q is reserved for templates: rename the argument", a.Name)
			continue
		}
		if seen[a.Name] {
			p.add(ap+".name", "argument %q is declared twice", a.Name)
			continue
		}
		seen[a.Name] = true
		ft, ok := fieldTypes[a.Type]
		if !ok {
			p.add(ap+".type", "%q is not a type: use string, integer, money, currency, email, boolean or enum", clip(a.Type, 40))
			continue
		}
		if a.MaxLen < 0 || a.MaxLen > 1<<20 {
			p.add(ap+".max_len", "must be between 1 and 1048576 bytes, or left out for the default")
		}
		if a.MaxLen != 0 && ft != tool.String && ft != tool.Email {
			p.add(ap+".max_len", "applies only to string and email arguments")
		}
		if a.Multiline && a.Type != "string" {
			p.add(ap+".multiline", "applies only to string arguments")
		}
		desc := a.Description
		if a.Type == "enum" {
			if len(a.Enum) == 0 {
				p.add(ap+".enum", "an enum argument lists its values")
			}
			for j, v := range a.Enum {
				if v == "" || len(v) > MaxNameLen || strings.ContainsAny(v, "\r\n,") {
					p.add(fmt.Sprintf("%s.enum[%d]", ap, j), "must be a short one-line value without commas")
				}
			}
			b.enums[d.Name] = append(b.enums[d.Name], enumArg{name: a.Name, values: a.Enum})
			if desc != "" {
				desc += "; "
			}
			desc += "one of: " + strings.Join(a.Enum, ", ")
		} else if len(a.Enum) > 0 {
			p.add(ap+".enum", "applies only to arguments of type enum")
		}
		s.Args.Fields = append(s.Args.Fields, tool.Field{Name: a.Name, Type: ft, Required: a.Required, Description: desc, Multiline: a.Multiline, MaxLen: a.MaxLen})
	}
	if s.Reversal {
		s.Args.Fields = []tool.Field{
			{Name: "original_key", Type: tool.String, Required: true, Description: "key of the call undone"},
			{Name: "original_tool", Type: tool.String, Description: "tool of the call undone"},
			{Name: "original_external_id", Type: tool.String, Description: "provider id of the effect undone"},
		}
	}
	if a := d.Approval; a != nil {
		s.Approval = &tool.Approval{Always: a.Always, Field: a.Field, AboveMinor: a.AboveMinor, Window: duration(p, path+".approval.window", a.Window, false)}
		switch {
		case a.Always && a.Field != "":
			p.add(path+".approval", "set always or field with above_minor, not both")
		case !a.Always && a.Field == "":
			p.add(path+".approval", "set always: true, or field and above_minor")
		case a.Field != "":
			if f, ok := s.Args.Field(a.Field); !ok || (f.Type != tool.Money && f.Type != tool.Integer) {
				p.add(path+".approval.field", "%q is not a declared integer or money argument", clip(a.Field, 40))
			}
			if a.AboveMinor < 0 {
				p.add(path+".approval.above_minor", "is negative")
			}
		}
	}
	if g := d.Guard; g != nil {
		s.Guard = &tool.Guard{Scope: g.Scope, Fields: g.Fields, Hold: g.Hold, Form: tool.EntityForm(g.Form),
			DuplicateWindow: duration(p, path+".guard.duplicate_window", g.DuplicateWindow, false)}
		if g.Scope == "" || len(g.Scope) > MaxNameLen {
			p.add(path+".guard.scope", "is missing or longer than %d bytes: name the rule, such as refund-per-order", MaxNameLen)
		}
		if len(g.Fields) == 0 {
			p.add(path+".guard.fields", "name at least one argument that identifies the entity")
		}
		for i, f := range g.Fields {
			if _, ok := s.Args.Field(f); !ok {
				p.add(fmt.Sprintf("%s.guard.fields[%d]", path, i), "%q is not a declared argument", clip(f, 40))
			}
		}
		if !s.Guard.Form.Valid() {
			p.add(path+".guard.form", "%q is not a form: use folded, cased or exact", clip(g.Form, 40))
		}
	}
	for i, m := range d.Match {
		mp := fmt.Sprintf("%s.match[%d]", path, i)
		if _, ok := s.Args.Field(m.Arg); !ok {
			p.add(mp+".arg", "%q is not a declared argument", clip(m.Arg, 40))
		}
		if m.Result == "" {
			p.add(mp+".result", "is missing: name the field of the kept result (response.keep) that records the argument")
		} else if d.MCP != nil {
			if !fieldRE.MatchString(m.Result) || len(m.Result) > MaxNameLen {
				p.add(mp+".result", "%q is not a field name of the upstream's answer (at the lookup's item)", clip(m.Result, 40))
			}
		} else if _, kept := d.Response.Keep[m.Result]; !kept {
			p.add(mp+".result", "%q is not a kept result field: add it to response.keep", clip(m.Result, 40))
		}
		s.Match = append(s.Match, tool.MatchField{Arg: m.Arg, Result: m.Result, Default: m.Default, IfSet: m.IfSet})
	}
	return s
}
