package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Limits of a catalogue, enforced by Parse and Load.
const (
	// MaxFileBytes is the largest catalogue file (1 MiB).
	MaxFileBytes = 1 << 20
	// MaxFiles is how many files one Load reads.
	MaxFiles = 32
	// MaxSystems is how many systems all files declare together.
	MaxSystems = 100
	// MaxTools is how many tools all files declare together.
	MaxTools = 500
	// MaxArgs is how many arguments one tool declares.
	MaxArgs = 64
	// MaxRules is how many error rules one tool declares.
	MaxRules = 64
	// MaxHeaders is how many headers one system or request declares.
	MaxHeaders = 32
	// MaxTemplateLen is the longest template (path, query value, body
	// field, header value, base URL), in bytes.
	MaxTemplateLen = 2048
	// MaxNameLen is the longest name (system, tool, argument, field).
	MaxNameLen = 64
	// MaxDepth is the deepest nesting of YAML collections.
	MaxDepth = 32
	// MaxProblems is how many problems an Error lists; the rest are
	// counted.
	MaxProblems = 200
)

// file is a catalogue file as written.
type file struct {
	Version    int             `yaml:"version" json:"version"`
	Systems    []systemDecl    `yaml:"systems" json:"systems"`
	MCPServers []mcpServerDecl `yaml:"mcp_servers" json:"mcp_servers"`
	Tools      []toolDecl      `yaml:"tools" json:"tools"`
}

type systemDecl struct {
	Name    string       `yaml:"name"`
	BaseURL string       `yaml:"base_url"`
	CAFile  string       `yaml:"ca_file"`
	Headers []headerDecl `yaml:"headers"`
}

// headerDecl is a header the system sends on every request. Its value is a
// constant (for non-secret headers), or comes from an environment variable
// or a file.
type headerDecl struct {
	Name     string `yaml:"name"`
	Value    string `yaml:"value"`
	FromEnv  string `yaml:"from_env"`
	FromFile string `yaml:"from_file"`
	Prefix   string `yaml:"prefix"`
}

type toolDecl struct {
	Name            string        `yaml:"name"`
	Description     string        `yaml:"description"`
	System          string        `yaml:"system"`
	Class           string        `yaml:"class"`
	Timeout         string        `yaml:"timeout"`
	Retry           *retryDecl    `yaml:"retry"`
	Args            []argDecl     `yaml:"args"`
	Approval        *approvalDecl `yaml:"approval"`
	MaxAmountMinor  int64         `yaml:"max_amount_minor"`
	Guard           *guardDecl    `yaml:"guard"`
	Match           []matchDecl   `yaml:"match"`
	ReconcileWindow string        `yaml:"reconcile_window"`
	Settle          string        `yaml:"settle"`
	Compensator     string        `yaml:"compensator"`
	Reverses        string        `yaml:"reverses"`
	NoLookup        bool          `yaml:"no_lookup"`
	Request         requestDecl   `yaml:"request"`
	Response        responseDecl  `yaml:"response"`
	Errors          *errorsDecl   `yaml:"errors"`
	Lookup          *lookupDecl   `yaml:"lookup"`
	MCP             *mcpDecl      `yaml:"mcp"`
}

type retryDecl struct {
	MaxAttempts        int32   `yaml:"max_attempts"`
	InitialInterval    string  `yaml:"initial_interval"`
	BackoffCoefficient float64 `yaml:"backoff_coefficient"`
	MaximumInterval    string  `yaml:"maximum_interval"`
}

type argDecl struct {
	Name        string   `yaml:"name"`
	Type        string   `yaml:"type"`
	Required    bool     `yaml:"required"`
	Description string   `yaml:"description"`
	Multiline   bool     `yaml:"multiline"`
	MaxLen      int      `yaml:"max_len"`
	Enum        []string `yaml:"enum"`
}

type approvalDecl struct {
	Always     bool   `yaml:"always"`
	Field      string `yaml:"field"`
	AboveMinor int64  `yaml:"above_minor"`
	Window     string `yaml:"window"`
}

type guardDecl struct {
	Scope           string   `yaml:"scope"`
	Fields          []string `yaml:"fields"`
	Hold            bool     `yaml:"hold"`
	DuplicateWindow string   `yaml:"duplicate_window"`
	Form            string   `yaml:"form"`
}

type matchDecl struct {
	Arg     string `yaml:"arg"`
	Result  string `yaml:"result"`
	Default string `yaml:"default"`
	IfSet   bool   `yaml:"if_set"`
}

type requestDecl struct {
	Method  string            `yaml:"method"`
	Path    string            `yaml:"path"`
	Query   map[string]string `yaml:"query"`
	Headers map[string]string `yaml:"headers"`
	Key     *keyDecl          `yaml:"key"`
	Body    *bodyDecl         `yaml:"body"`
}

// keyDecl says where the operation key goes besides any {key} template.
type keyDecl struct {
	Header    string `yaml:"header"`
	BodyField string `yaml:"body_field"`
}

type bodyDecl struct {
	Format string            `yaml:"format"`
	Fields map[string]string `yaml:"fields"`
}

type responseDecl struct {
	ExternalID string            `yaml:"external_id"`
	Keep       map[string]string `yaml:"keep"`
	RejectIf   *rejectIfDecl     `yaml:"reject_if"`
}

// rejectIfDecl turns a 2xx answer into a business rejection: when the value
// at Pointer equals Equals (compared as JSON text), the call is rejected
// with the code found at Code (or "rejected").
type rejectIfDecl struct {
	Pointer string `yaml:"pointer"`
	Equals  string `yaml:"equals"`
	Code    string `yaml:"code"`
}

type errorsDecl struct {
	Code  string     `yaml:"code"`
	Rules []ruleDecl `yaml:"rules"`
}

type ruleDecl struct {
	Status  []int    `yaml:"status"`
	Codes   []string `yaml:"codes"`
	Outcome string   `yaml:"outcome"`
}

type lookupDecl struct {
	Request requestDecl `yaml:"request"`
	Found   foundDecl   `yaml:"found"`
	Absent  absentDecl  `yaml:"absent"`
	Lag     string      `yaml:"lag"`
}

type foundDecl struct {
	Status     []int  `yaml:"status"`
	Item       string `yaml:"item"`
	ExternalID string `yaml:"external_id"`
}

type absentDecl struct {
	Status          []int  `yaml:"status"`
	Authoritative   bool   `yaml:"authoritative"`
	AuthoritativeIf string `yaml:"authoritative_if"`
}

// problems collects every problem of a catalogue, each under its path.
type problems struct {
	prefix string
	list   []string
	more   int
	// unknown holds, by mapping (prefix and path), the keys no field
	// declares: a misspelt key (lookpu) leaves the key meant (lookup)
	// unset, and the "is missing" problem that follows from it is not
	// listed.
	unknown map[string][]string
}

// followOn are the starts of the problems a misspelt key of the same
// mapping explains.
var followOn = []string{"is missing", "a write needs a lookup"}

func (p *problems) add(path, format string, args ...any) {
	parent, key := splitPath(path)
	for _, u := range p.unknown[p.prefix+"\x00"+parent] {
		if !misspelt(u, key) {
			continue
		}
		for _, f := range followOn {
			if strings.HasPrefix(format, f) {
				return
			}
		}
	}
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	if p.prefix != "" {
		msg = p.prefix + ": " + msg
	}
	if len(p.list) >= MaxProblems {
		p.more++
		return
	}
	p.list = append(p.list, msg)
}

// unknownKey records that the mapping at path has key, which no field
// declares.
func (p *problems) unknownKey(path, key string) {
	if p.unknown == nil {
		p.unknown = map[string][]string{}
	}
	p.unknown[p.prefix+"\x00"+path] = append(p.unknown[p.prefix+"\x00"+path], key)
}

// unknownKeys counts the unknown keys recorded so far.
func (p *problems) unknownKeys() int {
	n := 0
	for _, keys := range p.unknown {
		n += len(keys)
	}
	return n
}

// splitPath is the mapping a path's last key is in and that key: tools[0]
// and lookup for tools[0].lookup.
func splitPath(path string) (string, string) {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}

// misspelt reports whether key written is likely a misspelling of want:
// the same ignoring case, or at most two edits apart (for keys of more
// than three bytes).
func misspelt(written, want string) bool {
	a, b := strings.ToLower(written), strings.ToLower(want)
	if a == b {
		return true
	}
	if len(b) <= 3 || len(a) > MaxNameLen || len(b) > MaxNameLen {
		return false
	}
	return editDistance(a, b) <= 2
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment) of a and b: a swap of two neighbours is one edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &Error{Problems: p.list, More: p.more}
}

// Error is a refused catalogue: every problem found, each a YAML path and
// what to change.
type Error struct {
	Problems []string
	// More counts the problems found beyond MaxProblems, not listed.
	More int
}

// Error implements error: every problem on a line of its own.
func (e *Error) Error() string {
	msg := fmt.Sprintf("tool catalogue refused, fix every problem named (%d):\n  %s", len(e.Problems)+e.More, strings.Join(e.Problems, "\n  "))
	if e.More > 0 {
		msg += fmt.Sprintf("\n  and %d more problems of the same file: fix these first", e.More)
	}
	return msg
}

// decodeFile checks the raw YAML (size, UTF-8, depth, aliases, unknown and
// duplicate keys) and decodes it. Problems go to p; nil means p explains.
func decodeFile(data []byte, p *problems) *file {
	if len(data) > MaxFileBytes {
		p.add("", "is %d bytes, the limit is %d: split it into several files", len(data), MaxFileBytes)
		return nil
	}
	if !utf8.Valid(data) {
		p.add("", "is not valid UTF-8: save it as UTF-8")
		return nil
	}
	if d := flowDepth(data); d > MaxDepth {
		p.add("", "nests collections %d deep, the limit is %d", d, MaxDepth)
		return nil
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		p.add("", "is not valid YAML: %s", oneLine(err))
		return nil
	}
	if len(f.Docs) != 1 {
		p.add("", "holds %d YAML documents: write exactly one", len(f.Docs))
		return nil
	}
	var w astWalker
	ast.Walk(&w, f.Docs[0])
	if w.alias > 0 {
		p.add("", "uses YAML anchors, aliases or merge keys (%d): write every value out", w.alias)
	}
	if w.maxDepth > MaxDepth {
		p.add("", "nests collections %d deep, the limit is %d", w.maxDepth, MaxDepth)
	}
	if p.n() > 0 {
		return nil
	}
	if f.Docs[0].Body == nil {
		p.add("", "is empty: write `version: 1` and the systems and tools")
		return nil
	}
	var generic any
	if err := yaml.NodeToValue(f.Docs[0].Body, &generic); err != nil {
		p.add("", "cannot be read: %s", oneLine(err))
		return nil
	}
	if generic == nil {
		p.add("", "is empty: write `version: 1` and the systems and tools")
		return nil
	}
	before, unknown := p.n(), p.unknownKeys()
	checkKeys(generic, reflect.TypeFor[file](), "", p)
	var out file
	if found := p.n() - before; found > 0 {
		// Unknown keys are named and the rest of the file is still checked
		// (every problem in one pass); a value of the wrong shape stops
		// here, as the decoder cannot read past it.
		if found != p.unknownKeys()-unknown {
			return nil
		}
		if err := yaml.NodeToValue(f.Docs[0].Body, &out); err != nil {
			return nil
		}
		return &out
	}
	if err := yaml.NodeToValue(f.Docs[0].Body, &out, yaml.Strict()); err != nil {
		p.add("", "%s", oneLine(err))
		return nil
	}
	return &out
}

// oneLine is the first line of err's text (goccy/go-yaml adds a source
// excerpt on the following lines).
func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// flowDepth is the deepest nesting of flow collections ([ and {) outside
// quotes and comments, found before the parser recurses into it.
func flowDepth(data []byte) int {
	depth, maxDepth := 0, 0
	var quote byte
	comment := false
	for i, c := range data {
		switch {
		case comment:
			if c == '\n' {
				comment = false
			}
		case quote != 0:
			if c == quote && (quote == '\'' || i == 0 || data[i-1] != '\\') {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || data[i-1] == ' ' || data[i-1] == '\n'):
			comment = true
		case c == '[' || c == '{':
			depth++
			maxDepth = max(maxDepth, depth)
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
		}
	}
	return maxDepth
}

type astWalker struct {
	alias    int
	maxDepth int
}

func (w *astWalker) Visit(n ast.Node) ast.Visitor {
	switch n.(type) {
	case *ast.AliasNode, *ast.AnchorNode, *ast.MergeKeyNode:
		w.alias++
	}
	return &depthWalker{parent: w, depth: 0}
}

// depthWalker tracks the collection depth below a node.
type depthWalker struct {
	parent *astWalker
	depth  int
}

func (d *depthWalker) Visit(n ast.Node) ast.Visitor {
	depth := d.depth
	switch n.(type) {
	case *ast.AliasNode, *ast.AnchorNode, *ast.MergeKeyNode:
		d.parent.alias++
	case *ast.MappingNode, *ast.SequenceNode:
		depth++
		d.parent.maxDepth = max(d.parent.maxDepth, depth)
	}
	return &depthWalker{parent: d.parent, depth: depth}
}

// checkKeys reports every key of v that the Go type t (decoded from it) does
// not declare, with its path, and values of the wrong shape.
func checkKeys(v any, t reflect.Type, path string, p *problems) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			if v != nil {
				p.add(path, "must be a mapping of keys, got %s", shape(v))
			}
			return
		}
		fields := map[string]reflect.StructField{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fields[name] = f
			names = append(names, name)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				p.unknownKey(path, k)
				if near := nearest(k, names); near != "" {
					p.add(join(path, k), "is not a known key: did you mean %s? (known: %s)", near, strings.Join(names, ", "))
					continue
				}
				p.add(join(path, k), "is not a known key: use one of %s", strings.Join(names, ", "))
				continue
			}
			checkKeys(m[k], f.Type, join(path, k), p)
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			if v != nil {
				p.add(path, "must be a list, got %s", shape(v))
			}
			return
		}
		for i, e := range s {
			checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), p)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			if v != nil {
				p.add(path, "must be a mapping, got %s", shape(v))
			}
			return
		}
		for _, k := range sortedKeys(m) {
			checkKeys(m[k], t.Elem(), join(path, k), p)
		}
	case reflect.Interface:
		// A free-form value (an MCP arguments template), checked where
		// it is built.
	case reflect.String:
		switch v.(type) {
		case map[string]any, []any:
			p.add(path, "must be a single value, got %s", shape(v))
		}
	default:
		switch v.(type) {
		case map[string]any, []any, string:
			if _, isStr := v.(string); isStr && t.Kind() != reflect.Bool {
				p.add(path, "must be a number, got a string")
			} else if isStr {
				p.add(path, "must be true or false, got a string")
			} else {
				p.add(path, "must be a single value, got %s", shape(v))
			}
		}
	}
}

// nearest is the name of names that key likely misspells, or "".
func nearest(key string, names []string) string {
	for _, n := range names {
		if misspelt(key, n) {
			return n
		}
	}
	return ""
}

func shape(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
}

func join(path, key string) string {
	if path == "" {
		return pathKey(key)
	}
	return path + "." + pathKey(key)
}

// pathKey is a key as a path element: quoted when it is not a plain name.
func pathKey(k string) string {
	if len(k) <= MaxNameLen && keyRE.MatchString(k) {
		return k
	}
	return fmt.Sprintf("%q", clip(k, 40))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

var keyRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// readFile reads a catalogue file, refusing one above MaxFileBytes without
// reading it all.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if n > MaxFileBytes {
		return nil, errors.New("is larger than the limit of 1 MiB: split it into several files")
	}
	return buf.Bytes(), nil
}

// n counts the problems found, listed or not.
func (p *problems) n() int { return len(p.list) + p.more }
