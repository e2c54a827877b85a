package catalog

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/agentsaga/agentsaga/mcptool"
	"github.com/agentsaga/agentsaga/tool"
)

// EnvTools is the environment variable that names catalogue files when no
// --tools flag does: paths separated by os.PathListSeparator (split them
// with filepath.SplitList).
const EnvTools = "AGENTSAGA_TOOLS"

// Catalog is a loaded, checked tool catalogue.
type Catalog struct {
	tools   []tool.Tool
	specs   tool.Specs
	servers []*mcptool.Server
}

// Load reads and checks the catalogue files at paths (at most MaxFiles) as
// one catalogue, reading secrets from the environment and files. It returns
// an *Error naming every problem of every file, each prefixed by its file
// name, or the catalogue.
func Load(paths ...string) (*Catalog, error) { return LoadWith(Options{}, paths...) }

// LoadWith is Load with options.
func LoadWith(opts Options, paths ...string) (*Catalog, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("tool catalogue: no file given: pass at least one --tools FILE")
	}
	if len(paths) > MaxFiles {
		return nil, fmt.Errorf("tool catalogue: %d files given, the limit is %d: merge some", len(paths), MaxFiles)
	}
	srcs := make([]Source, 0, len(paths))
	var p problems
	for _, path := range paths {
		data, err := readFile(path)
		if err != nil {
			p.prefix = path
			p.add("", "%v", err)
			continue
		}
		srcs = append(srcs, Source{Name: path, Data: data})
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return ParseWith(opts, srcs...)
}

// Source is one catalogue file's name (for messages) and content.
type Source struct {
	Name string
	Data []byte
}

// Parse checks the catalogue file data (name is used in messages), reading
// secrets from the environment and files.
func Parse(name string, data []byte) (*Catalog, error) {
	return ParseWith(Options{}, Source{Name: name, Data: data})
}

// ParseWith checks several sources as one catalogue.
func ParseWith(opts Options, srcs ...Source) (*Catalog, error) {
	b := &builder{opts: opts, p: &problems{}, systems: map[string]*system{}, mcpServers: map[string]*mcptool.Server{}, decls: map[string]toolDecl{},
		enums: map[string][]enumArg{}, where: map[string]string{}}
	var files []*file
	var names []string
	for _, src := range srcs {
		b.p.prefix = src.Name
		f := decodeFile(src.Data, b.p)
		if f == nil {
			continue
		}
		if f.Version != 1 {
			b.p.add("version", "is %d: this worker reads version 1 (write `version: 1`)", f.Version)
			continue
		}
		files = append(files, f)
		names = append(names, src.Name)
	}
	nSys, nTools := 0, 0
	for _, f := range files {
		nSys += len(f.Systems) + len(f.MCPServers)
		nTools += len(f.Tools)
	}
	b.p.prefix = ""
	if nSys > MaxSystems {
		b.p.add("systems", "%d systems declared, the limit is %d", nSys, MaxSystems)
	}
	if nTools > MaxTools {
		b.p.add("tools", "%d tools declared, the limit is %d", nTools, MaxTools)
	}
	if nSys > MaxSystems || nTools > MaxTools {
		return nil, b.p.err()
	}
	for fi, f := range files {
		b.p.prefix = names[fi]
		b.dir = filepath.Dir(names[fi])
		for i, s := range f.Systems {
			b.system(i, s)
		}
		for i, s := range f.MCPServers {
			b.mcpServer(i, s)
		}
	}
	// Declarations first, so templates and reversals can name tools of
	// any file.
	for fi, f := range files {
		b.p.prefix = names[fi]
		for i, d := range f.Tools {
			path := fmt.Sprintf("tools[%d]", i)
			if !validName(d.Name) {
				b.p.add(path+".name", "%q is not a name: use lower case letters, digits and '_', starting with a letter, at most %d bytes", clip(d.Name, 40), MaxNameLen)
				continue
			}
			if w, dup := b.where[d.Name]; dup {
				b.p.add(path+".name", "tool %q is declared twice (also at %s)", d.Name, w)
				continue
			}
			b.where[d.Name] = names[fi] + ": " + path
			b.decls[d.Name] = d
		}
	}
	built := map[string]*httpTool{}
	proxied := map[string]*mcptool.Tool{}
	var order []string
	for fi, f := range files {
		b.p.prefix = names[fi]
		for i, d := range f.Tools {
			if b.where[d.Name] != names[fi]+": "+fmt.Sprintf("tools[%d]", i) {
				continue
			}
			if d.MCP != nil {
				if mt := b.mcpTool(fmt.Sprintf("tools[%d]", i), d); mt != nil {
					proxied[d.Name] = mt
					order = append(order, d.Name)
				}
				continue
			}
			if t := b.tool(fmt.Sprintf("tools[%d]", i), d); t != nil {
				built[d.Name] = t
				order = append(order, d.Name)
			}
		}
	}
	b.p.prefix = ""
	if err := b.p.err(); err != nil {
		return nil, err
	}
	for _, t := range built {
		if t.reverses != "" {
			t.original = built[t.reverses]
		}
	}
	c := &Catalog{specs: tool.Specs{}}
	for _, n := range order {
		if mt, ok := proxied[n]; ok {
			c.tools = append(c.tools, mcptool.New(mt))
			c.specs[n] = mt.Def
			c.servers = appendServer(c.servers, mt.Server)
			continue
		}
		t := built[n]
		var tt tool.Tool = t
		if t.lookup != nil {
			tt = &reconcilingTool{t}
		}
		c.tools = append(c.tools, tt)
		c.specs[n] = t.spec
	}
	// The registry's own checks, so a catalogue that loads registers.
	if _, err := tool.NewRegistry(c.tools...); err != nil {
		return nil, fmt.Errorf("tool catalogue refused: %w", err)
	}
	return c, nil
}

// Tools returns the catalogue's tools, in file order; each write that
// declares a lookup implements tool.Reconciler.
func (c *Catalog) Tools() []tool.Tool { return append([]tool.Tool(nil), c.tools...) }

// Specs returns every tool's spec, by name, for validating plans without
// calling any provider.
func (c *Catalog) Specs() tool.Specs {
	out := make(tool.Specs, len(c.specs))
	for k, v := range c.specs {
		out[k] = v
	}
	return out
}

// Registry returns a registry of the catalogue's tools and extra (Go
// tools), or the registry's error naming every offender.
func (c *Catalog) Registry(extra ...tool.Tool) (*tool.Registry, error) {
	return tool.NewRegistry(append(c.Tools(), extra...)...)
}

// Tools returns the registry a command runs: the tools of the catalogue
// files and the Go tools (extra) together, or one error naming every
// problem in the files and every offending tool. Without files it is the Go
// tools' registry. The worker, the starter and the MCP gateway all build
// their tools here.
func Tools(files []string, extra ...tool.Tool) (*tool.Registry, error) {
	if len(files) == 0 {
		return tool.NewRegistry(extra...)
	}
	cat, err := Load(files...)
	if err != nil {
		return nil, fmt.Errorf("--tools: %w", err)
	}
	reg, err := cat.Registry(extra...)
	if err != nil {
		return nil, fmt.Errorf("--tools: %w", err)
	}
	return reg, nil
}

type builder struct {
	opts       Options
	dir        string // the directory of the file being read: relative paths in it start there
	p          *problems
	systems    map[string]*system
	mcpServers map[string]*mcptool.Server
	decls      map[string]toolDecl
	enums      map[string][]enumArg
	where      map[string]string
}

// local is path as the file being read means it: a relative path starts at
// the file's directory, as in docker compose, not at the worker's.
func (b *builder) local(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(b.dir, path)
}

type enumArg struct {
	name   string
	values []string
}

// system is a provider the catalogue's tools call. Its headers hold
// secrets: it prints without them.
type system struct {
	name    string
	baseURL string
	headers http.Header
	client  *http.Client
}

// String implements fmt.Stringer without the headers' values.
func (s *system) String() string { return "system " + s.name + " (headers masked)" }

// GoString implements fmt.GoStringer without the headers' values.
func (s *system) GoString() string { return s.String() }

func (b *builder) tool(path string, d toolDecl) *httpTool {
	p := b.p
	before := p.n()
	s := b.spec(path, d)
	t := &httpTool{spec: s, reverses: d.Reverses, enums: b.enums[d.Name]}
	sys, ok := b.systems[d.System]
	switch {
	case d.System == "":
		p.add(path+".system", "is missing: name one of the declared systems")
	case !ok:
		p.add(path+".system", "%q is not a declared system", clip(d.System, 40))
	default:
		t.sys = sys
	}
	scope := b.links(path, d, s)
	t.req = b.request(path+".request", d.Request, scope, s.Class.IsWrite(), true)
	// An argument that fills a path segment is refused at plan validation
	// when it is a dot segment (tool.DotSegment).
	for _, ref := range t.req.path.refs() {
		for i := range t.spec.Args.Fields {
			if t.spec.Args.Fields[i].Name == ref {
				t.spec.Args.Fields[i].PathSegment = true
			}
		}
	}
	t.resp = b.response(path+".response", d.Response, s.Class.IsWrite())
	t.errs = b.errorRules(path+".errors", d.Errors, s.Class.IsWrite())
	// An unknown class (NON_IDEMPOTENT) is named once, at .class: the
	// checks that depend on the class wait for a known one.
	if d.Lookup != nil {
		if s.Class.Valid() && !s.Class.IsWrite() {
			p.add(path+".lookup", "a READ tool has nothing to look up: remove it")
		}
		if d.NoLookup {
			p.add(path+".lookup", "the tool declares no_lookup: remove one of them")
		}
		t.lookup = b.lookup(path+".lookup", *d.Lookup)
		if t.lookup != nil {
			t.spec.Lag = t.lookup.lag
			b.horizon(path, t.spec)
		}
	} else if s.Class.IsWrite() && !d.NoLookup {
		p.add(path+".lookup", "a write needs a lookup by key, or no_lookup: true so its unknown outcomes go to a human")
	}
	if p.n() > before {
		return nil
	}
	return t
}

// links checks a tool's reverses and compensator against the other tools
// and returns what its templates may reference.
func (b *builder) links(path string, d toolDecl, s tool.Spec) refScope {
	p := b.p
	scope := refScope{args: s.Args, reversal: d.Reverses != ""}
	if d.Reverses != "" {
		orig, ok := b.decls[d.Reverses]
		switch {
		case !ok:
			p.add(path+".reverses", "%q is not a tool of the catalogue", clip(d.Reverses, 40))
		case orig.Compensator != d.Name:
			p.add(path+".reverses", "%s does not name %s as its compensator: set compensator: %s on it", d.Reverses, d.Name, d.Name)
		default:
			scope.original = fieldsOf(orig)
		}
		if d.Compensator != "" {
			p.add(path+".compensator", "a reversal cannot itself be reversed")
		}
		if s.Class.Valid() && !s.Class.IsWrite() {
			p.add(path+".class", "a reversal is a write: declare its write class")
		}
	}
	if d.Compensator != "" {
		if s.Class.Valid() && !s.Class.IsWrite() {
			p.add(path+".compensator", "a READ tool has nothing to reverse: remove it")
		}
		c, ok := b.decls[d.Compensator]
		switch {
		case !ok:
			p.add(path+".compensator", "%q is not a tool of the catalogue", clip(d.Compensator, 40))
		case c.Reverses != d.Name:
			p.add(path+".compensator", "%s does not declare reverses: %s", d.Compensator, d.Name)
		}
	}
	return scope
}

// refScope is what a template of one tool may reference.
type refScope struct {
	args     tool.Schema
	reversal bool
	original map[string]bool // args of the reversed tool
}

func fieldsOf(d toolDecl) map[string]bool {
	m := map[string]bool{}
	for _, a := range d.Args {
		m[a.Name] = true
	}
	return m
}

// template parses src and reports every reference that sc does not know
// (requiredOnly: optional arguments too, for paths).
func (b *builder) template(path, src string, sc refScope, requiredOnly bool) template {
	t, msg := parseTemplate(src)
	if msg != "" {
		b.p.add(path, "%s", msg)
		return t
	}
	for _, r := range t.refs() {
		f, ok := b.ref(path, r, sc)
		if ok && requiredOnly && !f.Required {
			b.p.add(path, "{%s} is optional: a path may use only required arguments (put it in the query)", r)
		}
	}
	return t
}

// ref checks one template reference r against sc, naming what is wrong at
// path. It returns the argument an {ARG} reference names, with ok false
// for any other reference and for one that is not known.
func (b *builder) ref(path, r string, sc refScope) (tool.Field, bool) {
	switch {
	case r == "key":
	case strings.HasPrefix(r, "original."):
		if !sc.reversal {
			b.p.add(path, "{%s} is only for reversal tools (reverses: TOOL)", r)
			break
		}
		rest := strings.TrimPrefix(r, "original.")
		switch {
		case rest == "external_id" || rest == "key" || rest == "tool":
		case strings.HasPrefix(rest, "args."):
			if sc.original != nil && !sc.original[strings.TrimPrefix(rest, "args.")] {
				b.p.add(path, "{%s} is not an argument of the reversed tool", r)
			}
		default:
			b.p.add(path, "{%s} is not known: use {original.external_id}, {original.key}, {original.tool} or {original.args.NAME}", r)
		}
	default:
		f, ok := sc.args.Field(r)
		if !ok || sc.reversal {
			b.p.add(path, "{%s} is not a declared argument", clip(r, 40))
			return tool.Field{}, false
		}
		return f, true
	}
	return tool.Field{}, false
}

// sendsKey reports whether the template references the key.
func sendsKey(t template) bool {
	for _, r := range t.refs() {
		if r == "key" {
			return true
		}
	}
	return false
}
