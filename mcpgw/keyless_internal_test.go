package mcpgw

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/sagaclient"
)

// FuzzCallerOf: whatever identity a token verifier or a flag hands the
// gateway, the caller it keeps in the ledger is plain text within the
// ledger's limit (never a reason to refuse a call), the same identity gives
// the same caller, and another agent or named session another one.
func FuzzCallerOf(f *testing.F) {
	for _, s := range [][3]string{
		{"", "", "mcp-1"}, {"alice", "", ""}, {"", "mcp-agent", "s1"}, {"u\x00ser", "", ""},
		{"\xff\xfe", "agent", "s"}, {strings.Repeat("é", 300), "", ""}, {"alice", "mcp-agent", strings.Repeat("s", 128)},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, user, agent, explicit string) {
		g := &gateway{o: Options{Session: sagaclient.SessionOptions{RequestedBy: agent}}}
		req := &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: user}}}
		c := g.callerOf(req, explicit, "mcp-session")
		if c == "" || len(c) > ledger.MaxKeylessIdent || !utf8.ValidString(c) || strings.IndexByte(c, 0) >= 0 {
			t.Fatalf("caller %q: must be plain text of 1 to %d bytes", c, ledger.MaxKeylessIdent)
		}
		if again := g.callerOf(req, explicit, "mcp-session"); again != c {
			t.Fatalf("the same identity gave %q, then %q", c, again)
		}
		if user == "" && agent != "" && g.callerOf(req, explicit+"x", "mcp-session") == c {
			t.Fatalf("another named session of agent %q is the same caller %q", agent, c)
		}
	})
}
