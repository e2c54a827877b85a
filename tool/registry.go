package tool

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Catalog answers what a tool declares. A Registry is one; workflows and plan
// validation need only this.
type Catalog interface {
	Spec(name string) (Spec, bool)
}

// Specs is a Catalog made of plain specs, as workflows hold them.
type Specs map[string]Spec

// Spec implements Catalog.
func (s Specs) Spec(name string) (Spec, bool) {
	sp, ok := s[name]
	return sp, ok
}

// Registry holds the tools a worker runs. It is built only from tools that
// declare everything the saga needs.
type Registry struct {
	tools map[string]Tool
	specs Specs
}

// NewRegistry checks every tool and returns a registry, or one error that
// names every offender and what each must fix. A worker must not start
// without one.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]Tool{}, specs: Specs{}}
	var problems []string
	for i, t := range tools {
		if t == nil {
			problems = append(problems, fmt.Sprintf("tool #%d is nil", i+1))
			continue
		}
		s := t.Spec()
		if s.Name == "" {
			problems = append(problems, fmt.Sprintf("tool #%d (%T) has no name in its Spec", i+1, t))
			continue
		}
		if _, dup := r.tools[s.Name]; dup {
			problems = append(problems, fmt.Sprintf("%s: registered twice", s.Name))
			continue
		}
		r.tools[s.Name] = t
		r.specs[s.Name] = s
	}
	names := r.Names()
	for _, name := range names {
		problems = append(problems, r.check(r.tools[name])...)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("tool registry refused, fix every tool named: %s", strings.Join(problems, "; "))
	}
	return r, nil
}

func (r *Registry) check(t Tool) []string {
	s := t.Spec()
	var p []string
	add := func(format string, args ...any) { p = append(p, s.Name+": "+fmt.Sprintf(format, args...)) }
	if !s.Class.Valid() {
		if s.Class == "" {
			add("declares no side-effect class: set Class to one of %s", classList())
		} else {
			add("declares unknown class %q: use one of %s", s.Class, classList())
		}
	}
	if s.Timeout <= 0 {
		add("declares no Timeout: set how long one attempt may take")
	}
	if s.Retry != nil {
		if err := s.Retry.Validate(); err != nil {
			add("retry policy: %v", err)
		}
	}
	if s.Settle < 0 {
		add("declares a negative Settle %s: set how long after a send the provider may still commit, or 0 for the default", s.Settle)
	}
	if s.Lag < 0 {
		add("declares a negative Lag %s: set how long a commit may stay invisible to the lookup, or 0", s.Lag)
	}
	if s.Class.IsWrite() && !s.NoLookup && s.Horizon() >= s.Window() {
		add("its in-flight horizon (settle %s + lag %s) is not shorter than its reconcile window %s: an absent lookup answer could never settle; shorten Settle or Lag, or lengthen ReconcileWindow", s.SettleTime(), s.Lag, s.Window())
	}
	_, canLookup := t.(Reconciler)
	if s.Class.IsWrite() && !canLookup && !s.NoLookup {
		add("is a write without a Reconcile: implement tool.Reconciler or declare NoLookup so unknown outcomes go to a human")
	}
	if s.Compensator != "" {
		c, ok := r.specs[s.Compensator]
		switch {
		case !ok:
			add("compensator %q is not registered", s.Compensator)
		case !c.Reversal:
			add("compensator %q is not declared as a Reversal tool", s.Compensator)
		}
	}
	if s.Reversal && !s.Class.IsWrite() {
		add("is a Reversal but not a write: declare its write class")
	}
	for _, f := range s.Args.Fields {
		if f.Name == "" {
			add("has an argument without a name")
		}
		if f.MaxLen < 0 {
			add("argument %q declares a negative MaxLen: set a positive byte count or 0 for the default", f.Name)
		}
	}
	if s.MaxAmountMinor < 0 {
		add("declares a negative MaxAmountMinor: set a positive ceiling in minor units or 0 for the default")
	}
	if a := s.Approval; a != nil && a.Field != "" {
		if f, ok := s.Args.Field(a.Field); !ok || (f.Type != Money && f.Type != Integer) {
			add("approval field %q must be a declared integer or money argument", a.Field)
		}
	}
	if g := s.Guard; g != nil {
		if g.Scope == "" || len(g.Fields) == 0 {
			add("guard needs a Scope and at least one field")
		}
		for _, f := range g.Fields {
			if _, ok := s.Args.Field(f); !ok {
				add("guard field %q is not a declared argument", f)
			}
		}
		if !g.Form.Valid() {
			add("guard form %q is unknown: use %q, %q or %q", g.Form, FoldedEntity, CasedEntity, ExactEntity)
		}
	}
	for _, m := range s.Match {
		if m.Result == "" {
			add("match field for arg %q names no result field", m.Arg)
		}
		if _, ok := s.Args.Field(m.Arg); !ok {
			add("match arg %q is not a declared argument", m.Arg)
		}
	}
	return p
}

func classList() string {
	var s []string
	for _, c := range Classes {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ")
}

// Tool returns the tool called name.
func (r *Registry) Tool(name string) (Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Spec implements Catalog.
func (r *Registry) Spec(name string) (Spec, bool) { return r.specs.Spec(name) }

// Specs returns a copy of every spec, by name.
func (r *Registry) Specs() Specs {
	out := make(Specs, len(r.specs))
	for k, v := range r.specs {
		out[k] = v
	}
	return out
}

// Names returns the registered tool names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.tools))
	for n := range r.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Reconcile looks up key with the tool called name. A tool without a
// Reconciler answers Unknown.
func (r *Registry) Reconcile(ctx context.Context, name, key string) (Lookup, error) {
	t, ok := r.tools[name]
	if !ok {
		return Lookup{}, fmt.Errorf("reconcile %s: tool %q is not registered on this worker", key, name)
	}
	rc, ok := t.(Reconciler)
	if !ok {
		return Lookup{Status: Unknown}, nil
	}
	return rc.Reconcile(ctx, key)
}
