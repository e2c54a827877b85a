package mcptest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Holder makes an upstream act after the client gave up: Hold(write, look)
// keeps the next tools/call of upstream tool write from reaching the
// upstream until a tools/call of tool look has been answered, then sends it
// on. The client's call of write times out meanwhile (its cancellation
// reaches the upstream first and is ignored, as MCP allows), the lookup
// answers that nothing is there, and the upstream acts just after: the race
// of a slow commit, with a real server. Use Wrap as
// mcptool.Server.WrapConnection.
type Holder struct {
	mu    sync.Mutex
	write string
	look  string
	held  []held
	calls map[string]int // tools/call requests that reached the upstream
}

type held struct {
	conn mcp.Connection
	msg  jsonrpc.Message
}

// Hold holds the next tools/call of write until a call of look is answered.
func (h *Holder) Hold(write, look string) {
	h.mu.Lock()
	h.write, h.look = write, look
	h.mu.Unlock()
}

// Calls counts the tools/call requests of upstream tool name that reached
// the upstream (a held one once it is sent on).
func (h *Holder) Calls(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[name]
}

// Wrap wraps one connection.
func (h *Holder) Wrap(c mcp.Connection) mcp.Connection {
	return &holdConn{Connection: c, h: h, looks: map[jsonrpc.ID]bool{}}
}

type holdConn struct {
	mcp.Connection
	h     *Holder
	mu    sync.Mutex
	looks map[jsonrpc.ID]bool
}

func toolName(m jsonrpc.Message) (*jsonrpc.Request, string) {
	r, ok := m.(*jsonrpc.Request)
	if !ok || r.Method != "tools/call" {
		return nil, ""
	}
	var p struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(r.Params, &p)
	return r, p.Name
}

func (c *holdConn) Write(ctx context.Context, m jsonrpc.Message) error {
	r, name := toolName(m)
	if r != nil {
		h := c.h
		h.mu.Lock()
		if name == h.write && h.write != "" {
			h.write = ""
			h.held = append(h.held, held{conn: c.Connection, msg: m})
			h.mu.Unlock()
			return nil // held: the upstream has not seen it yet
		}
		if h.calls == nil {
			h.calls = map[string]int{}
		}
		h.calls[name]++
		if name == h.look && len(h.held) > 0 {
			c.mu.Lock()
			c.looks[r.ID] = true
			c.mu.Unlock()
		}
		h.mu.Unlock()
	}
	return c.Connection.Write(ctx, m)
}

func (c *holdConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		return m, err
	}
	if r, ok := m.(*jsonrpc.Response); ok {
		c.mu.Lock()
		look := c.looks[r.ID]
		delete(c.looks, r.ID)
		c.mu.Unlock()
		if look {
			// The lookup has answered (before the held call acted):
			// the held call reaches the upstream now.
			c.h.mu.Lock()
			hs := c.h.held
			c.h.held = nil
			for _, x := range hs {
				_, name := toolName(x.msg)
				c.h.calls[name]++
			}
			c.h.mu.Unlock()
			for _, x := range hs {
				_ = x.conn.Write(context.WithoutCancel(ctx), x.msg)
			}
		}
	}
	return m, nil
}
