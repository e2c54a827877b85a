package catalog

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/mcptool"
	"github.com/agentsaga/agentsaga/redact"
)

// Limits of an MCP server declaration.
const (
	// MaxMCPArgs is how many command arguments one MCP server declares.
	MaxMCPArgs = 64
	// MaxMCPEnv is how many environment variables one MCP server declares.
	MaxMCPEnv = 64
)

// mcpServerDecl is an upstream MCP server: a command over stdio or a
// streamable HTTP URL.
type mcpServerDecl struct {
	Name           string       `yaml:"name"`
	Command        string       `yaml:"command"`
	Args           []string     `yaml:"args"`
	Env            []envDecl    `yaml:"env"`
	Dir            string       `yaml:"dir"`
	URL            string       `yaml:"url"`
	Headers        []headerDecl `yaml:"headers"`
	ConnectTimeout string       `yaml:"connect_timeout"`
}

// envDecl is one environment variable of a stdio server: a constant, or read
// from the worker's environment or a file.
type envDecl struct {
	Name     string `yaml:"name"`
	Value    string `yaml:"value"`
	FromEnv  string `yaml:"from_env"`
	FromFile string `yaml:"from_file"`
}

// mcpDecl is the call of a tool proxied to an upstream MCP tool.
type mcpDecl struct {
	Server     string         `yaml:"server"`
	Tool       string         `yaml:"tool"`
	Args       any            `yaml:"args"`
	Key        *mcpKeyDecl    `yaml:"key"`
	ExternalID string         `yaml:"external_id"`
	Item       string         `yaml:"item"`
	Lookup     *mcpLookupDecl `yaml:"lookup"`
}

type mcpKeyDecl struct {
	Arg  string `yaml:"arg"`
	Meta string `yaml:"meta"`
}

type mcpLookupDecl struct {
	Tool          string      `yaml:"tool"`
	Args          any         `yaml:"args"`
	Found         mcpTestDecl `yaml:"found"`
	Absent        mcpTestDecl `yaml:"absent"`
	Authoritative bool        `yaml:"authoritative"`
	Item          string      `yaml:"item"`
	ExternalID    string      `yaml:"external_id"`
	Lag           string      `yaml:"lag"`
}

type mcpTestDecl struct {
	Error        bool   `yaml:"error"`
	TextContains string `yaml:"text_contains"`
	NonEmpty     string `yaml:"non_empty"`
	Empty        string `yaml:"empty"`
}

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// upstreamToolRE is an MCP tool name (the spec allows letters, digits,
	// '_', '-' and '.').
	upstreamToolRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	metaKeyRE      = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,128}$`)
)

// expand replaces ${VAR} in s from the environment, naming each variable
// that is not set under path.
func (b *builder) expand(path, s string) string {
	if len(s) > MaxTemplateLen {
		b.p.add(path, "is %d bytes, the limit is %d", len(s), MaxTemplateLen)
		return ""
	}
	return envRE.ReplaceAllStringFunc(s, func(m string) string {
		name := envRE.FindStringSubmatch(m)[1]
		v, ok := b.opts.getenv(name)
		if !ok {
			b.p.add(path, "environment variable %s is not set: set it or write the value out", name)
		}
		return v
	})
}

func (b *builder) mcpServer(i int, d mcpServerDecl) {
	path := fmt.Sprintf("mcp_servers[%d]", i)
	p := b.p
	if !validName(d.Name) {
		p.add(path+".name", "%q is not a name: use lower case letters, digits and '_', starting with a letter, at most %d bytes", clip(d.Name, 40), MaxNameLen)
		return
	}
	if _, dup := b.mcpServers[d.Name]; dup {
		p.add(path+".name", "mcp server %q is declared twice", d.Name)
		return
	}
	s := &mcptool.Server{Name: d.Name}
	b.mcpServers[d.Name] = s
	if w := b.opts.MCPWrap; w != nil {
		name := d.Name
		s.WrapConnection = func(c mcp.Connection) mcp.Connection { return w(name, c) }
	}
	s.ConnectTimeout = duration(p, path+".connect_timeout", d.ConnectTimeout, false)
	switch {
	case d.Command == "" && d.URL == "":
		p.add(path, "declares neither command (a stdio server) nor url (a streamable HTTP server): set one")
		return
	case d.Command != "" && d.URL != "":
		p.add(path, "declares both command and url: set one")
		return
	}
	if d.URL != "" {
		for _, f := range []struct {
			set  bool
			name string
		}{{len(d.Args) > 0, "args"}, {len(d.Env) > 0, "env"}, {d.Dir != "", "dir"}} {
			if f.set {
				p.add(path+"."+f.name, "applies only to a stdio server (command): remove it")
			}
		}
		raw := b.expand(path+".url", d.URL)
		u, err := url.Parse(raw)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			p.add(path+".url", "%q is not an http(s) URL with a host", clip(redact.String(raw), 80))
		case u.User != nil:
			p.add(path+".url", "holds credentials: move them to a header with from_env or from_file")
		}
		s.URL = raw
		s.Header = b.mcpHeaders(path, d.Headers)
		s.HTTPClient = b.httpClient(nil)
		return
	}
	if len(d.Headers) > 0 {
		p.add(path+".headers", "applies only to an HTTP server (url): a stdio server takes secrets in env")
	}
	s.Command = b.expand(path+".command", d.Command)
	if strings.ContainsAny(s.Command, "\x00\r\n") {
		p.add(path+".command", "holds a line break or NUL")
	}
	if len(d.Args) > MaxMCPArgs {
		p.add(path+".args", "declares %d arguments, the limit is %d", len(d.Args), MaxMCPArgs)
	}
	for j, a := range d.Args {
		ap := fmt.Sprintf("%s.args[%d]", path, j)
		if _, found := redact.Find(a); found {
			p.add(ap, "looks like a secret: never write it inline, pass it in env with from_env or from_file")
			continue
		}
		s.Args = append(s.Args, b.expand(ap, a))
	}
	s.Dir = b.expand(path+".dir", d.Dir)
	if len(d.Env) > MaxMCPEnv {
		p.add(path+".env", "declares %d variables, the limit is %d", len(d.Env), MaxMCPEnv)
	}
	seen := map[string]bool{}
	for j, e := range d.Env {
		ep := fmt.Sprintf("%s.env[%d]", path, j)
		if !envNameRE.MatchString(e.Name) || len(e.Name) > MaxNameLen {
			p.add(ep+".name", "%q is not an environment variable name", clip(e.Name, 40))
			continue
		}
		if seen[e.Name] {
			p.add(ep+".name", "%s is declared twice", e.Name)
			continue
		}
		seen[e.Name] = true
		v, ok := b.secretValue(ep, e.Name, e.Value, e.FromEnv, e.FromFile)
		if !ok {
			continue
		}
		if strings.ContainsRune(v, 0) {
			p.add(ep, "the value holds a NUL")
			continue
		}
		s.Env = append(s.Env, e.Name+"="+v)
	}
}

// secretValue reads a value written inline (refused when it looks like a
// credential), from the environment or from a file.
func (b *builder) secretValue(path, name, value, fromEnv, fromFile string) (string, bool) {
	p := b.p
	n := 0
	for _, set := range []bool{value != "", fromEnv != "", fromFile != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		p.add(path, "set exactly one of value, from_env and from_file")
		return "", false
	}
	switch {
	case value != "":
		if secretHeader(name) {
			p.add(path+".value", "%s carries a credential: never write it inline, use from_env or from_file", name)
			return "", false
		}
		if _, found := redact.Find(value); found {
			p.add(path+".value", "looks like a secret: never write it inline, use from_env or from_file")
			return "", false
		}
		return value, true
	case fromEnv != "":
		v, ok := b.opts.getenv(fromEnv)
		if !ok || v == "" {
			p.add(path+".from_env", "environment variable %s is not set or empty: set it before starting the worker", fromEnv)
			return "", false
		}
		return v, true
	}
	raw, err := b.opts.readFile(b.local(fromFile))
	if err != nil {
		p.add(path+".from_file", "cannot be read: %v", err)
		return "", false
	}
	v := strings.TrimRight(string(raw), "\r\n")
	if v == "" {
		p.add(path+".from_file", "%s is empty", fromFile)
		return "", false
	}
	return v, true
}

func (b *builder) mcpHeaders(path string, hs []headerDecl) http.Header {
	out := http.Header{}
	if len(hs) > MaxHeaders {
		b.p.add(path+".headers", "declares %d headers, the limit is %d", len(hs), MaxHeaders)
	}
	for j, h := range hs {
		hp := fmt.Sprintf("%s.headers[%d]", path, j)
		if !headerRE.MatchString(h.Name) || len(h.Name) > MaxNameLen {
			b.p.add(hp+".name", "%q is not a header name", clip(h.Name, 40))
			continue
		}
		v, ok := b.secretValue(hp, h.Name, h.Value, h.FromEnv, h.FromFile)
		if !ok {
			continue
		}
		v = h.Prefix + v
		if strings.ContainsAny(v, "\r\n\x00") {
			b.p.add(hp, "the value holds a line break or NUL: a header value is one line")
			continue
		}
		out.Add(h.Name, v)
	}
	return out
}

// mcpTool builds a tool proxied to an upstream MCP tool, or reports why not.
func (b *builder) mcpTool(path string, d toolDecl) *mcptool.Tool {
	p := b.p
	before := p.n()
	m := d.MCP
	s := b.spec(path, d)
	// SERVER/TOOL: approval cards show the upstream tool a call runs.
	s.System = m.Server + "/" + m.Tool
	if d.System != "" {
		p.add(path+".system", "an mcp tool names its server in mcp.server: remove system")
	}
	for _, f := range []struct {
		set  bool
		name string
	}{{!reflect.ValueOf(d.Request).IsZero(), "request"}, {!reflect.ValueOf(d.Response).IsZero(), "response"},
		{d.Errors != nil, "errors"}, {d.Lookup != nil, "lookup"}} {
		if f.set {
			p.add(path+"."+f.name, "is for HTTP tools: an mcp tool declares its call under mcp: (mcp.lookup for its lookup)")
		}
	}
	scope := b.links(path, d, s)
	t := &mcptool.Tool{Def: s, Upstream: m.Tool, ExternalID: m.ExternalID}
	srv, ok := b.mcpServers[m.Server]
	switch {
	case m.Server == "":
		p.add(path+".mcp.server", "is missing: name one of mcp_servers")
	case !ok:
		p.add(path+".mcp.server", "%q is not a declared mcp server", clip(m.Server, 40))
	default:
		t.Server = srv
	}
	if !upstreamToolRE.MatchString(m.Tool) {
		p.add(path+".mcp.tool", "%q is not an MCP tool name: write the upstream tool's name (letters, digits, '_', '-', '.', at most 128)", clip(m.Tool, 40))
	}
	t.Args = b.mcpTemplate(path+".mcp.args", m.Args, scope)
	if t.Args == nil && s.Reversal {
		p.add(path+".mcp.args", "a reversal builds the upstream's arguments from {original.args.NAME}: declare them")
	}
	b.pointer(path+".mcp.external_id", m.ExternalID)
	b.pointer(path+".mcp.item", m.Item)
	t.Item = m.Item
	if k := m.Key; k != nil {
		switch {
		case (k.Arg == "") == (k.Meta == ""):
			p.add(path+".mcp.key", "set exactly one of arg (an upstream argument such as idempotency_key) and meta (a _meta field such as agentsaga/key)")
		case k.Arg != "" && !upstreamToolRE.MatchString(k.Arg):
			p.add(path+".mcp.key.arg", "%q is not an argument name", clip(k.Arg, 40))
		case k.Meta != "" && !metaKeyRE.MatchString(k.Meta):
			p.add(path+".mcp.key.meta", "%q is not a _meta field name (letters, digits, '_', '.', '/', '-', at most 128)", clip(k.Meta, 40))
		}
		t.KeyArg, t.KeyMeta = k.Arg, k.Meta
	}
	if l := m.Lookup; l != nil {
		lp := path + ".mcp.lookup"
		if s.Class.Valid() && !s.Class.IsWrite() {
			p.add(lp, "a READ tool has nothing to look up: remove it")
		}
		if d.NoLookup {
			p.add(lp, "the tool declares no_lookup: remove one of them")
		}
		if !upstreamToolRE.MatchString(l.Tool) {
			p.add(lp+".tool", "%q is not an MCP tool name: write the upstream read tool that finds the effect", clip(l.Tool, 40))
		}
		lk := &mcptool.Lookup{Upstream: l.Tool, Args: b.mcpTemplate(lp+".args", l.Args, scope),
			Found: b.mcpTest(lp+".found", l.Found), Absent: b.mcpTest(lp+".absent", l.Absent),
			Authoritative: l.Authoritative, Item: l.Item, ExternalID: l.ExternalID}
		if lk.Found == lk.Absent {
			p.add(lp, "found and absent are the same test: say what a found answer holds (text_contains, non_empty) and what an absent one does")
		}
		b.pointer(lp+".item", l.Item)
		b.pointer(lp+".external_id", l.ExternalID)
		if t.Def.Lag = duration(p, lp+".lag", l.Lag, false); t.Def.Lag > MaxSettle {
			p.add(lp+".lag", "%s is longer than the limit %s: a lookup that lags this long cannot settle a step; declare no_lookup", t.Def.Lag, MaxSettle)
		}
		b.horizon(path, t.Def)
		t.Lookup = lk
		if t.Item == "" {
			// Match reads the item the lookup reads, in the write's
			// own answer too.
			t.Item = l.Item
		}
	} else if s.Class.IsWrite() && !d.NoLookup {
		p.add(path+".mcp.lookup", "a write needs a lookup through an upstream read tool, or no_lookup: true so its unknown outcomes go to a human")
	}
	if p.n() > before {
		return nil
	}
	return t
}

func (b *builder) mcpTest(path string, d mcpTestDecl) mcptool.Test {
	if len(d.TextContains) > MaxTemplateLen {
		b.p.add(path+".text_contains", "is %d bytes, the limit is %d", len(d.TextContains), MaxTemplateLen)
	}
	b.pointer(path+".non_empty", d.NonEmpty)
	b.pointer(path+".empty", d.Empty)
	return mcptool.Test{Error: d.Error, TextContains: d.TextContains, NonEmpty: d.NonEmpty, Empty: d.Empty}
}

// pointer checks a JSON pointer into an upstream answer.
func (b *builder) pointer(path, ptr string) {
	if ptr == "" {
		return
	}
	if !strings.HasPrefix(ptr, "/") || len(ptr) > MaxTemplateLen {
		b.p.add(path, "%q is not a JSON pointer: write one such as /entities/0/name (at most %d bytes)", clip(ptr, 40), MaxTemplateLen)
	}
}

// mcpTemplate checks an arguments template and every reference in it.
func (b *builder) mcpTemplate(path string, v any, sc refScope) *mcptool.Template {
	if v == nil {
		return nil
	}
	if _, ok := v.(map[string]any); !ok {
		b.p.add(path, "must be a mapping of the upstream tool's arguments")
		return nil
	}
	t, err := mcptool.NewTemplate(v)
	if err != nil {
		b.p.add(path, "%v", err)
		return nil
	}
	for _, r := range t.Refs() {
		b.ref(path, r, sc)
	}
	return t
}

func appendServer(list []*mcptool.Server, s *mcptool.Server) []*mcptool.Server {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// Close ends the sessions of the catalogue's MCP servers (stdio servers'
// processes are stopped). Tools called afterwards connect again.
func (c *Catalog) Close() error {
	var errs []error
	for _, s := range c.servers {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("mcp server %s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}
