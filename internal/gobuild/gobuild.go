// Package gobuild builds the binaries that tests run as real processes:
// this module's own commands (Build, relinked each time: they are the code
// under test) and the commands of a pinned dependency (Cached, linked once
// per version into the user's cache directory, so a warm CI does not relink
// the Temporal server on every run).
package gobuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Module is a dependency as `go list -m` reports it.
type Module struct {
	// Path and Version are the module's, as go.mod pins it.
	Path, Version string
	// Dir is its directory in the module cache (read only).
	Dir string
}

// goCmd runs the go command in dir and returns its standard output.
func goCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	bin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("gobuild: the go command builds the test binaries: put it on PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gobuild: go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// Build runs `go build -o out [flags] pkg` in dir (a directory of this
// module); flags are extra go build flags, such as -ldflags.
func Build(ctx context.Context, dir, out, pkg string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	_, err := goCmd(ctx, dir, args...)
	return err
}

// Lookup reports the module path as the build list of the module in dir
// pins it.
func Lookup(ctx context.Context, dir, path string) (Module, error) {
	out, err := goCmd(ctx, dir, "list", "-m", "-f", "{{.Path}}\t{{.Version}}\t{{.Dir}}", path)
	if err != nil {
		return Module{}, err
	}
	f := strings.Split(strings.TrimSpace(string(out)), "\t")
	if len(f) != 3 || f[1] == "" || f[2] == "" {
		return Module{}, fmt.Errorf("gobuild: go list -m %s printed %q: the module must be a versioned dependency in go.mod, downloaded (go mod download %s)", path, out, path)
	}
	return Module{Path: f[0], Version: f[1], Dir: f[2]}, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// CacheDir is where Cached keeps the binaries of m: under the user's cache
// directory (AGENTSAGA_BIN_CACHE overrides it), keyed by the module, its
// version, the Go version and the target, so another pin or toolchain
// links anew.
func CacheDir(ctx context.Context, dir string, m Module) (string, error) {
	out, err := goCmd(ctx, dir, "env", "GOVERSION", "GOOS", "GOARCH")
	if err != nil {
		return "", err
	}
	env := strings.Fields(string(out))
	if len(env) != 3 {
		return "", fmt.Errorf("gobuild: go env GOVERSION GOOS GOARCH printed %q", out)
	}
	root := os.Getenv(EnvCache)
	if root == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("gobuild: find the user cache directory (or set %s): %w", EnvCache, err)
		}
		root = filepath.Join(base, "agentsaga", "bin")
	}
	key := unsafeName.ReplaceAllString(m.Path+"@"+m.Version+"-"+strings.Join(env, "-"), "_")
	return filepath.Join(root, key), nil
}

// EnvCache overrides the directory Cached keeps its binaries in.
const EnvCache = "AGENTSAGA_BIN_CACHE"

// Cached returns the binary of pkg (a command of module m, built from the
// module in dir so go.mod's pins and go.sum apply) named name in m's
// CacheDir, building it there first when it is missing. It reports whether
// it had to build. A binary is written under a temporary name and renamed,
// so a build cut short or run twice at once never leaves a broken one.
func Cached(ctx context.Context, dir string, m Module, name, pkg string) (string, bool, error) {
	cache, err := CacheDir(ctx, dir, m)
	if err != nil {
		return "", false, err
	}
	bin := filepath.Join(cache, name)
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return bin, false, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("gobuild: %w", err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", false, fmt.Errorf("gobuild: make the cache directory: %w", err)
	}
	tmp, err := os.CreateTemp(cache, name+".building-*")
	if err != nil {
		return "", false, fmt.Errorf("gobuild: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := Build(ctx, dir, tmp.Name(), pkg); err != nil {
		return "", false, err
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", false, fmt.Errorf("gobuild: %w", err)
	}
	return bin, true, nil
}
