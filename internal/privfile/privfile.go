// Package privfile makes the files agentsaga keeps data or secrets in
// readable by their owner only (mode 0600), whatever the directory and the
// umask: a database that SQLite would create 0644 is created 0600 first, and
// one found wider is narrowed.
//
// It is internal: not API.
package privfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Mode is the mode of a private file.
const Mode fs.FileMode = 0o600

// Ensure makes path an existing file of mode Mode: it creates an empty one
// when path does not exist, and narrows the mode of one that is readable or
// writable by others than its owner. SQLite gives a database's -wal and
// -shm files the database file's mode, so ensuring the database is enough.
func Ensure(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, Mode)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("open %s: %w (the process must own the file it keeps data in)", path, err)
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode().Perm()&^Mode != 0 {
		if err := f.Chmod(Mode); err != nil {
			return fmt.Errorf("narrow %s to mode %o (it is %o): %w", path, Mode, st.Mode().Perm(), err)
		}
	}
	return nil
}

// Create writes data to a new file at path with mode Mode. It never
// replaces an existing file: a secret that is overwritten by mistake is
// lost, with everything sealed or signed with it.
func Create(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, Mode)
	if err != nil {
		return fmt.Errorf("create %s (an existing file is never overwritten: pick another path): %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}
