package sagaworker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/sagaworker"
)

// blockingStore holds every RecordDecision until release is closed.
type blockingStore struct {
	ledger.Store
	started chan string
	release chan struct{}
	done    chan string
}

func (s *blockingStore) RecordDecision(_ context.Context, d ledger.DecisionRecord) (int64, error) {
	s.started <- d.By
	<-s.release
	s.done <- d.By
	return 1, nil
}

// The recorder writes each refused Update on a goroutine of its own, never
// blocking the validator, at most MaxPendingRefusals at once: one more at
// the same moment is logged, not written.
func TestRefusalRecorderIsBounded(t *testing.T) {
	n := sagaworker.MaxPendingRefusals
	s := &blockingStore{started: make(chan string, n+1), release: make(chan struct{}), done: make(chan string, n+1)}
	var logs bytes.Buffer
	rec := sagaworker.RefusalRecorder(s, slog.New(slog.NewTextHandler(&logs, nil)))
	for range n {
		rec(ledger.DecisionRecord{Kind: "refused", By: "mallory"})
	}
	for range n {
		<-s.started // every one is being written, none returned
	}
	rec(ledger.DecisionRecord{Kind: "refused", By: "one-too-many"})
	if !strings.Contains(logs.String(), "too many at once") || !strings.Contains(logs.String(), "one-too-many") {
		t.Fatalf("the record beyond the bound was not logged: %q", logs.String())
	}
	close(s.release)
	for range n {
		if by := <-s.done; by != "mallory" {
			t.Fatalf("wrote %q", by)
		}
	}
	select {
	case by := <-s.started:
		t.Fatalf("the record beyond the bound was written too (%q)", by)
	default:
	}
}
