package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// Key returns the operation key of step (numbered from 1) of a plan:
// {session}:{turn}:{step}:{tool}. It is made here, by code, never by the
// model; it is the activity's ActivityID, the ledger's primary key and the
// Idempotency-Key every provider receives, the same on every attempt.
func Key(session string, turn, step int, toolName string) string {
	return fmt.Sprintf("%s:%d:%d:%s", session, turn, step, toolName)
}

// KeyID returns an operation key (or a reversal's, with ":compensate") as a
// redact.Identifier for the logs: its turn and step numbers are the
// engine's counters, never masked as a card number however they fall (a
// keyed MCP turn has 13 digits, and one in ten passes the Luhn check),
// while its session id and tool name are masked as any text is.
func KeyID(key string) redact.Identifier {
	id := redact.Identifier{Text: key}
	parts := strings.SplitN(key, ":", 4)
	for i := 1; i < len(parts) && i <= 2; i++ {
		if n, err := strconv.ParseInt(parts[i], 10, 64); err == nil && n > 0 && strconv.FormatInt(n, 10) == parts[i] {
			id.Counters = append(id.Counters, n)
		}
	}
	return id
}

// Key returns the operation key of step n (from 1) of p.
func (p Plan) Key(n int) string { return Key(p.SessionID, p.Turn, n, p.Steps[n-1].Tool) }

// WorkflowID returns the workflow ID of a plan: agent-plan:{session}:{turn}.
// Starting the same plan twice attaches to one workflow.
func WorkflowID(session string, turn int) string {
	return fmt.Sprintf("agent-plan:%s:%d", session, turn)
}

// WorkflowID returns p's workflow ID.
func (p Plan) WorkflowID() string { return WorkflowID(p.SessionID, p.Turn) }

// Fingerprint returns the request fingerprint of one call: SHA-256, in hex,
// of the canonical JSON of {"args": ..., "tool": ...} (keys sorted, numbers
// exactly as written, which validation has made integers for money).
func Fingerprint(toolName string, args json.RawMessage) (string, error) {
	obj, err := tool.DecodeObject(args)
	if err != nil {
		return "", fmt.Errorf("fingerprint %s args: %w", toolName, err)
	}
	return hashJSON(map[string]any{"tool": toolName, "args": obj})
}

// StepFingerprint returns the fingerprint of step n (from 1) of p.
func (p Plan) StepFingerprint(n int) (string, error) {
	s := p.Steps[n-1]
	return Fingerprint(s.Tool, s.Args)
}

// Fingerprint returns the fingerprint of the whole plan: SHA-256 of the
// canonical JSON of its session, turn and steps. Two plans under one session
// and turn are the same plan exactly when their fingerprints are equal.
func (p Plan) Fingerprint() (string, error) {
	steps := make([]any, len(p.Steps))
	for i, s := range p.Steps {
		obj, err := tool.DecodeObject(s.Args)
		if err != nil {
			return "", fmt.Errorf("fingerprint steps[%d].args: %w", i+1, err)
		}
		step := map[string]any{"tool": s.Tool, "args": obj}
		if s.Hold != "" {
			step["hold"] = s.Hold // asking a person first is part of the plan
		}
		steps[i] = step
	}
	m := map[string]any{"session_id": p.SessionID, "turn": p.Turn, "steps": steps}
	if p.Parallel {
		m["parallel"] = true // how the steps run is part of the plan
	}
	return hashJSON(m)
}

// Canonical returns args re-encoded canonically (keys sorted, no spaces).
func Canonical(args json.RawMessage) (json.RawMessage, error) {
	obj, err := tool.DecodeObject(args)
	if err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}

func hashJSON(v any) (string, error) {
	b, err := json.Marshal(v) // encoding/json sorts map keys; json.Number keeps its literal
	if err != nil {
		return "", fmt.Errorf("canonical JSON: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
