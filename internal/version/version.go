// Package version says which agentsaga a binary is, for `worker --version`
// and `starter version`.
//
// A release build sets Version at link time:
//
//	go build -ldflags "-X github.com/agentsaga/agentsaga/internal/version.Version=v0.1.0" ./worker
//
// Without it, String reads the build information the Go toolchain stamps
// into every binary: the module version of agentsaga (a tagged release
// installed with `go install ...@v0.1.0`, or the pseudo-version Go makes
// from the commit of a checkout), else the VCS revision the binary was built
// from, marked "+dirty" when the tree had uncommitted changes.
package version

import (
	"runtime"
	"runtime/debug"
)

// Module is agentsaga's module path.
const Module = "github.com/agentsaga/agentsaga"

// Version is the release this binary is, set with -ldflags -X (see the
// package doc). Empty means: read it from the build information.
var Version = ""

// String returns the version of agentsaga in this binary: Version when it
// was set at link time, else what the build information says, else "devel".
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(info)
}

// Line is what `worker --version` and `starter version` print:
// "agentsaga VERSION (GOVERSION)".
func Line() string { return "agentsaga " + String() + " (" + runtime.Version() + ")" }

// fromBuildInfo names agentsaga's version in info: the module's version when
// agentsaga is the main module or a dependency of another team's main (its
// replacement's, if it is replaced), else, for agentsaga's own binaries, the
// VCS revision, else "devel".
func fromBuildInfo(info *debug.BuildInfo) string {
	own := info.Main.Path == Module
	v := ""
	if own {
		v = info.Main.Version
	}
	for _, d := range info.Deps {
		if !own && d.Path == Module {
			v = d.Version
			if d.Replace != nil {
				v = d.Replace.Version
			}
		}
	}
	if v != "" && v != "(devel)" {
		return v
	}
	if !own {
		return "devel" // the revision settings are the other module's
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		return "devel-" + rev + "+dirty"
	}
	return "devel-" + rev
}
