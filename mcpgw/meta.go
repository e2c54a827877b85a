package mcpgw

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"

	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// The _meta fields of a tools/call request the gateway reads. All are
// optional.
const (
	// MetaSession names the AgentSession the call belongs to (letters,
	// digits, '.', '_' and '-', at most 128): workflow
	// agent-session:{value}. Without it the session is the MCP session:
	// "mcp-" and the first 32 hex digits of the SHA-256 of the
	// Mcp-Session-Id (streamable HTTP), or "mcp-" and a random UUID per
	// connection (stdio, in-memory).
	MetaSession = "agentsaga/session"
	// MetaTurn is an explicit turn number: a JSON integer from 1 to
	// KeyedTurnBase-1. The call becomes turn {value} of the session, its
	// operation key {session}:{value}:1:{tool}. Sending the same call with
	// the same value again returns the first result without a call; other
	// arguments under the same value are refused as a conflict.
	MetaTurn = "agentsaga/turn"
	// MetaKey is the client's idempotency key for the call: a string it
	// keeps the same when it resends the call (1 to 128 bytes of plain
	// text). Decimal digits (no leading zero, below KeyedTurnBase) name
	// that turn, as MetaTurn does; any other string names turn
	// KeyedTurnBase + the first 40 bits of its SHA-256. Either way a resent
	// call reaches the same turn and operation key, so it runs once.
	MetaKey = "agentsaga/key"
)

// KeyedTurnBase is where the turns named by a non-numeric MetaKey start
// (2^40); they stay below 2^41, within what JSON numbers of every language
// hold exactly. The gateway numbers calls without a key from 1 up.
const KeyedTurnBase = 1 << 40

// maxKeyLen bounds MetaKey, in bytes.
const maxKeyLen = 128

var sessionChars = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// callMeta is what a call's _meta says.
type callMeta struct {
	session string // explicit session, or ""
	turn    int    // explicit or keyed turn, or 0: the gateway numbers the call
	key     string // the MetaKey as sent, or ""
}

// parseMeta reads the gateway's fields of a call's _meta; other fields are
// left alone. A field present with a bad value is refused naming it.
func parseMeta(m map[string]any) (callMeta, error) {
	var c callMeta
	if v, ok := m[MetaSession]; ok {
		s, isStr := v.(string)
		if !isStr || !sessionChars.MatchString(s) {
			return c, fmt.Errorf("_meta %q must be 1 to 128 letters, digits, '.', '_' or '-' (it is part of every operation key), got %s: fix it or leave it out to use the MCP session", MetaSession, describe(v))
		}
		c.session = s
	}
	_, hasTurn := m[MetaTurn]
	_, hasKey := m[MetaKey]
	if hasTurn && hasKey {
		return c, fmt.Errorf("_meta holds both %q and %q: send one of them", MetaTurn, MetaKey)
	}
	if hasTurn {
		n, ok := integer(m[MetaTurn])
		if !ok || n < 1 || n >= KeyedTurnBase {
			return c, fmt.Errorf("_meta %q must be a JSON integer from 1 to %d, got %s", MetaTurn, KeyedTurnBase-1, describe(m[MetaTurn]))
		}
		c.turn = int(n)
	}
	if hasKey {
		s, isStr := m[MetaKey].(string)
		if !isStr || s == "" {
			return c, fmt.Errorf("_meta %q must be a non-empty string that stays the same when the call is resent, got %s", MetaKey, describe(m[MetaKey]))
		}
		if msg := tool.CheckText(s, maxKeyLen, false); msg != "" {
			return c, fmt.Errorf("_meta %q %s", MetaKey, msg)
		}
		c.key, c.turn = s, KeyTurn(s)
	}
	return c, nil
}

// KeyTurn returns the turn a MetaKey names: the number itself for decimal
// digits without a leading zero below KeyedTurnBase, else KeyedTurnBase
// plus the first 40 bits of the key's SHA-256. Two different keys may, with
// a chance of about one in 2^40 per pair, name one turn: a call under the
// other key is then refused as a conflict (other arguments) or answered
// with the first call's result (the same arguments), never run twice.
func KeyTurn(key string) int {
	if n, err := strconv.ParseInt(key, 10, 64); err == nil && n >= 1 && n < KeyedTurnBase && strconv.FormatInt(n, 10) == key {
		return int(n)
	}
	sum := sha256.Sum256([]byte(key))
	var b [8]byte
	copy(b[3:], sum[:5])
	return KeyedTurnBase + int(binary.BigEndian.Uint64(b[:]))
}

// integer reads a JSON integer however the transport decoded it.
func integer(v any) (int64, bool) {
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, false
		}
		return int64(x), true
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case int:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// describe names a _meta value for a message, masked and clipped.
func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("a %T", v)
	}
	return tool.Clip(redact.String(string(b)), 60)
}
