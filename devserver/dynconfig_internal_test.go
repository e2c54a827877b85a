package devserver

import (
	"testing"
	"time"

	"go.temporal.io/server/common/dynamicconfig"
)

// The keys that take the waiting intervals out of the workflow-task path
// are set by default (BENCHMARKS.md explains each), and Options.DynamicConfig
// overrides a default or adds a key, by name in any case.
func TestDynamicConfigDefaultsAndOverrides(t *testing.T) {
	want := map[string]any{
		"history.transferprocessormaxpollrps":            1000,
		"matching.numtaskqueuereadpartitions":            1,
		"matching.numtaskqueuewritepartitions":           1,
		"history.longpollexpirationinterval":             200 * time.Millisecond,
		"system.forcesearchattributescacherefreshonread": true,
	}
	got := DevDynamicConfig()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("default %s = %v, want %v", k, got[k], v)
		}
	}
	c := dynamicConfig(map[string]any{"History.TransferProcessorMaxPollRPS": 50, "matching.longPollExpirationInterval": time.Second})
	if v := c[dynamicconfig.TransferProcessorMaxPollRPS.Key()]; v != 50 {
		t.Errorf("override of the transfer poll rate: got %v, want 50", v)
	}
	if v := c[dynamicconfig.MakeKey("matching.longPollExpirationInterval")]; v != time.Second {
		t.Errorf("added key: got %v, want 1s", v)
	}
	if v := devDynamicConfig()[dynamicconfig.TransferProcessorMaxPollRPS.Key()]; v != 1000 {
		t.Errorf("an override changed the defaults themselves: %v", v)
	}
}

// A file-backed store is opened in WAL mode with synchronous=FULL: every
// commit is fsynced before it returns, with one fsync instead of two.
func TestFileStoreIsWALWithFullSync(t *testing.T) {
	cfg, err := prepareStore(Options{DataDir: t.TempDir(), Namespace: DefaultNamespace})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "full"} {
		if got := cfg.ConnectAttributes[k]; got != want {
			t.Errorf("connect attribute %s = %q, want %q", k, got, want)
		}
	}
}
