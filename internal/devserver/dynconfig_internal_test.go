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
		"system.forcesearchattributescacherefreshonread": "true while Start registers search attributes, then false",
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

// The forced search-attribute refresh is on until the attributes are
// settled, then off; a caller that sets the key keeps its value.
func TestForcedSearchAttributeRefreshEndsWhenSettled(t *testing.T) {
	force := func(c *devConfig) any { return c.GetValue(forceSARefresh)[0].Value }
	c := newDevConfig(nil)
	if got := force(c); got != true {
		t.Fatalf("before settle: %v, want true", got)
	}
	if v := c.GetValue(dynamicconfig.TransferProcessorMaxPollRPS.Key())[0].Value; v != 1000 {
		t.Errorf("another key: %v, want the default 1000", v)
	}
	c.settle()
	if got := force(c); got != false {
		t.Fatalf("after settle: %v, want false", got)
	}
	fixed := newDevConfig(map[string]any{"System.ForceSearchAttributesCacheRefreshOnRead": true})
	fixed.settle()
	if got := force(fixed); got != true {
		t.Fatalf("a caller's value after settle: %v, want true", got)
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
