package cli

import (
	"os"
	"path/filepath"
)

// docsText is README.md and docs/*.md together: what the tests hold the
// commands' flags against.
func docsText() ([]byte, error) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		return nil, err
	}
	var all []byte
	for _, f := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, b...)
	}
	return all, nil
}
